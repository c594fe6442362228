"""Reading a spec from YAML: every mistake reported with its ``file:line:col``, all at once.

``load_spec`` returns a validated ``Spec`` or raises ``SpecError`` listing every mistake
as ``file:line:col: path: message``, one per line, so a user can fix them all at once.
"""

from __future__ import annotations

import re
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from services.core.codec import schema_fields, use_schema_dir
from services.core.errors import SchemaNotFound, SpecError
from services.spec import checkpoint, egress, validate
from services.spec.model import (
    ENGINES,
    INTERNAL_TOPICS,
    RAW_SUFFIX,
    RECORD_TIMESTAMP,
    DpcConfig,
    HaDef,
    IngressDef,
    Merge,
    NodeDef,
    OperatorDef,
    Recovery,
    Scheme,
    Spec,
    StreamDef,
)
from services.spec.policies import FAILURE_POLICIES, STABILIZATION_POLICIES, Reconciliation
from services.spec.problems import Problems, to_python

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


_STREAM_KEYS = {"schema", "key", "partitions", "delay", "ingress", "topic", "egress"}
_INGRESS_KEYS = {"format", "time", "lateness", "idle", "replicas"}
_NODE_KEYS = {"operators", "replicas", "engine", "reconciliation", "ha", "flush_ms", "state", "checkpoint", "processes"}


def load_spec(path: str | Path) -> Spec:
    """Parse and validate a spec file."""
    p = Path(path)
    if not p.exists():
        raise SpecError([f"{p}: no such file"])
    return parse_spec(p.read_text(), source=str(p), path=p)


def parse_spec(text: str, source: str = "<spec>", path: Path | None = None) -> Spec:
    marks: dict[tuple, yaml.Mark] = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        loc = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise SpecError([f"{loc}: not valid YAML: {getattr(e, 'problem', e)}"]) from None
    doc = to_python(root, (), marks) if root is not None else None
    ck = Problems(source, marks)
    top = ck.mapping(doc, (), "the spec")
    if doc is not None and not isinstance(doc, dict):
        raise SpecError(ck.problems)
    ck.unknown_keys(top, {"name", "defaults", "dpc", "schemas", "streams", "operators", "nodes"}, ())
    name = top.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        ck.err(("name",), f"'name' must be a name of letters, digits, '-' or '_', got {name!r}")
        name = "hastream"
    defaults = ck.mapping(top.get("defaults"), ("defaults",), "defaults")
    ck.unknown_keys(defaults, {"partitions", "replicas"}, ("defaults",))
    d_parts = ck.pos_int(defaults, "partitions", ("defaults",), 1)
    d_repl = ck.pos_int(defaults, "replicas", ("defaults",), 1)

    schemas = _parse_schemas(ck, top, path)
    streams = _parse_streams(ck, top, d_parts, d_repl)
    operators = validate.operators(ck, top, streams)
    declared = set(ck.mapping(top.get("operators"), ("operators",), "operators"))
    nodes = _parse_nodes(ck, top, operators, declared, d_repl)
    _add_ingresses(ck, streams, operators, nodes)
    dpc = _parse_dpc(ck, top)
    spec = Spec(name, streams, operators, nodes, path, dpc, schemas)
    if not ck.problems:
        validate.graph(ck, spec)
        egress.check(ck, spec)
    if ck.problems:
        raise SpecError(ck.problems)
    return spec


def _parse_schemas(ck: Problems, top: dict, path: Path | None) -> Path | None:
    """``schemas: DIR``: the user's Avro schemas (``<name>.avsc``), relative to the spec's directory."""
    raw = top.get("schemas")
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        ck.err(("schemas",), f"'schemas' must be a directory path, got {raw!r}")
        return None
    d = Path(raw).expanduser()
    if not d.is_absolute():
        d = (path.parent if path is not None else Path.cwd()) / d
    if not d.is_dir():
        ck.err(("schemas",), f"no such directory: {d} (a directory of <name>.avsc files, relative to the spec)")
        return None
    try:
        use_schema_dir(d)
    except SchemaNotFound as e:
        ck.err(("schemas",), str(e))
        return None
    return d.resolve()


def _parse_dpc(ck: Problems, top: dict) -> DpcConfig:
    raw = ck.mapping(top.get("dpc"), ("dpc",), "dpc")
    d = DpcConfig()
    ints = (
        "delay",
        "bucket",
        "boundary_interval",
        "restart_image_interval",
        "heartbeat_interval",
        "failure_timeout",
        "max_kept",
    )
    choices: dict[str, tuple[Enum, ...]] = {
        "reconciliation": tuple(Reconciliation),
        "failure_policy": FAILURE_POLICIES,
        "stabilization_policy": STABILIZATION_POLICIES,
    }
    if "checkpoint_interval" in raw:
        ck.err(("dpc", "checkpoint_interval"), "'checkpoint_interval' is now 'restart_image_interval'")
        raw = {k: v for k, v in raw.items() if k != "checkpoint_interval"}
    ck.unknown_keys(raw, set(ints) | set(choices) | {"alpha"}, ("dpc",))
    vals: dict[str, Any] = {k: ck.pos_int(raw, k, ("dpc",), getattr(d, k)) for k in ints}
    for k, allowed in choices.items():
        vals[k] = _choice(ck, raw, k, ("dpc",), allowed, getattr(d, k))
    alpha = raw.get("alpha", d.alpha)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha <= 1:
        ck.err(("dpc", "alpha"), f"'alpha' must be a number in (0, 1], got {alpha!r}")
        alpha = d.alpha
    return DpcConfig(alpha=float(alpha), **vals)


def _parse_streams(ck: Problems, top: dict, d_parts: int, d_repl: int) -> dict[str, StreamDef]:
    raw = ck.mapping(top.get("streams"), ("streams",), "streams")
    if not raw:
        ck.err(("streams",), "at least one stream is required")
    out: dict[str, StreamDef] = {}
    taken: dict[str, str] = {}  # shared topic -> the stream reading it
    for sname, sdef in raw.items():
        path = ("streams", sname)
        if not isinstance(sname, str) or not _NAME_RE.match(sname):
            ck.err(path, f"stream name {sname!r} must be letters, digits, '-' or '_'")
            continue
        if sname in INTERNAL_TOPICS:
            ck.err(path, f"stream name '{sname}' is taken by the deployment's own topic <name>.{sname}: rename it")
            continue
        sdef = ck.mapping(sdef, path, f"stream '{sname}'")
        ck.unknown_keys(sdef, _STREAM_KEYS, path)
        schema = sdef.get("schema")
        if not isinstance(schema, str):
            ck.err(path, "'schema' is required (a file stem in schemas/ or in the spec's 'schemas:' directory)")
            continue
        try:
            fields = schema_fields(schema)
        except SchemaNotFound as e:
            ck.err(path + ("schema",), str(e))
            continue
        key = sdef.get("key")
        if key is not None and key not in fields:
            ck.err(path + ("key",), f"key field '{key}' is not in schema '{schema}' (fields: {', '.join(fields)})")
        delay = ck.pos_int(sdef, "delay", path, 0) if "delay" in sdef else None
        topic = _shared_topic(ck, sdef, path, taken)
        fed = "ingress" in sdef  # outside producers write the shared topic; the ingress's output is the deployment's
        partitions = ck.pos_int(sdef, "partitions", path, d_parts)
        egresses = egress.parse(ck, sdef.get("egress"), path + ("egress",), d_repl)
        out[sname] = sd = StreamDef(
            sname, schema, key, partitions, delay, topic=None if fed else topic, egress=egresses
        )
        if fed:
            ingress = _parse_ingress(ck, sdef["ingress"], path + ("ingress",), fields, d_repl)
            out[sname + RAW_SUFFIX] = replace(
                sd, name=sname + RAW_SUFFIX, delay=None, ingress=ingress, topic=topic, egress=()
            )
    return out


def _shared_topic(ck: Problems, sdef: dict, path: tuple, taken: dict[str, str]) -> str | None:
    """A source stream's ``topic:``: an existing topic it reads instead of the deployment's own."""
    topic = ck.topic(sdef, path)
    if topic is None:
        return None
    if topic in taken:
        ck.err(path + ("topic",), f"topic '{topic}' is already stream '{taken[topic]}''s: one stream per topic")
        return None
    taken[topic] = path[-1]
    return topic


def _parse_ingress(ck: Problems, raw: Any, path: tuple, fields: dict[str, Any], d_repl: int) -> IngressDef:
    """A stream's ``ingress:`` block (``{}`` or ``true`` take every default)."""
    obj = {} if raw is True else ck.mapping(raw, path, "'ingress'")
    ck.unknown_keys(obj, _INGRESS_KEYS, path)
    d = IngressDef()
    fmt = obj.get("format", d.format)
    if fmt not in ("json", "avro"):
        ck.err(path + ("format",), f"'format' must be json or avro, got {fmt!r}")
    time = obj.get("time", d.time)
    if time != RECORD_TIMESTAMP and time not in fields:
        ck.err(
            path + ("time",),
            f"'time' must be '{RECORD_TIMESTAMP}' (the Kafka record's) or a field of the schema "
            f"({', '.join(fields)}), got {time!r}",
        )
    lateness = ck.pos_int(obj, "lateness", path, d.lateness, minimum=0)
    idle = ck.pos_int(obj, "idle", path, 0, minimum=0) if "idle" in obj else None
    return IngressDef(str(fmt), str(time), lateness, idle, ck.pos_int(obj, "replicas", path, d_repl))


def ingress_node(stream: str) -> str:
    """The name of the node that feeds ``stream`` from its raw topic."""
    return f"ingress_{stream}"


def _add_ingresses(
    ck: Problems, streams: dict[str, StreamDef], operators: dict[str, OperatorDef], nodes: dict[str, NodeDef]
) -> None:
    """Each ingress is a node of its own: a one-input union from the raw stream to the typed one,
    replicated like any node, so DPC, restart images and replica choice serve it unchanged."""
    for raw in [sd for sd in streams.values() if sd.ingress is not None]:
        stream = raw.name.removesuffix(RAW_SUFFIX)
        name = ingress_node(stream)
        if name in operators or name in nodes:
            ck.err(("streams", stream, "ingress"), f"'{name}' is the ingress's name: rename the operator or node")
            continue
        if any(op.output == stream for op in operators.values()):
            ck.err(
                ("streams", stream, "ingress"),
                f"stream '{stream}' is written by an operator: it cannot have an ingress",
            )
            continue
        assert raw.ingress is not None
        operators[name] = OperatorDef(name, "union", (raw.name,), stream)
        nodes[name] = NodeDef(name, (name,), raw.ingress.replicas)


_HA_KEYS = {"scheme", "recovery", "interval_ms", "heartbeat_ms", "misses", "merge"}


def _parse_ha(ck: Problems, raw: Any, path: tuple) -> HaDef:
    """A node's ``ha:``: a scheme's name, or a mapping with ``scheme`` and its settings."""
    if raw is None:
        return HaDef()
    if isinstance(raw, str):
        raw = {"scheme": raw}
        at = path[:-1]  # a bare name: problems point at the ``ha`` key itself
    else:
        raw = ck.mapping(raw, path, "'ha'")
        at = path
    ck.unknown_keys(raw, _HA_KEYS, path)
    d = HaDef()
    if at is path and "scheme" not in raw:
        ck.err(path, f"'ha' needs a 'scheme': one of {', '.join(s.value for s in Scheme)}")
    scheme = _choice(ck, raw, "scheme", at, tuple(Scheme), d.scheme, key_name="ha" if at is not path else None)
    recovery = _choice(ck, raw, "recovery", path, tuple(Recovery), None)
    if scheme.kind.settings == "dpc" and any(k != "scheme" for k in raw):
        ck.err(
            path,
            f"the {scheme.value} scheme takes its settings from the spec's 'dpc:' section: give 'ha: {scheme.value}'",
        )
    return HaDef(
        scheme,
        recovery,
        ck.pos_int(raw, "interval_ms", path, d.interval_ms),
        ck.pos_int(raw, "heartbeat_ms", path, d.heartbeat_ms),
        ck.pos_int(raw, "misses", path, d.misses),
        _merge(ck, raw, path) if scheme.kind.settings == "ha" else d.merge,  # dpc: said above
    )


def _merge(ck: Problems, raw: dict, path: tuple) -> Merge:
    """``merge``: only the tuple-time order hastream runs; ``arrival`` is refused with what to write, since
    accepting it would promise an order (and a class) the node does not have."""
    if raw.get("merge") == "arrival":
        ck.err(
            path + ("merge",),
            f"node '{path[-2]}': merge: arrival is not run by hastream (a node's inputs are merged in tuple-time "
            "order, which keeps its replicas identical): remove it or write merge: time",
        )
        return Merge.TIME
    return _choice(ck, raw, "merge", path, tuple(Merge), Merge.TIME)


def _choice(
    ck: Problems, obj: dict, key: str, path: tuple, allowed: tuple[Any, ...], default: Any, key_name: str | None = None
) -> Any:
    """``obj[key]`` as a member of the enum ``allowed`` is from, or ``default`` (with a problem if it is none).
    ``key_name`` names the key in the problem when the YAML spells it otherwise."""
    v = obj.get(key)
    if v is None:
        return default
    for a in allowed:
        if v == a.value:
            return a
    name = key_name or key
    ck.err(path + (name,), f"'{name}' must be one of {', '.join(a.value for a in allowed)}, got {v!r}")
    return default


def _parse_nodes(
    ck: Problems, top: dict, operators: dict[str, OperatorDef], declared: set[str], d_repl: int
) -> dict[str, NodeDef]:
    raw = ck.mapping(top.get("nodes"), ("nodes",), "nodes")
    if not raw:
        ck.err(("nodes",), "at least one node is required")
    out: dict[str, NodeDef] = {}
    owner: dict[str, str] = {}
    for nname, ndef in raw.items():
        path = ("nodes", nname)
        if not isinstance(nname, str) or not _NAME_RE.match(nname):
            ck.err(path, f"node name {nname!r} must be letters, digits, '-' or '_'")
            continue
        ndef = ck.mapping(ndef, path, f"node '{nname}'")
        ck.unknown_keys(ndef, _NODE_KEYS, path)
        ops = ck.name_list(ndef.get("operators"), path + ("operators",), "'operators'")
        for i, o in enumerate(ops):
            if o not in declared:
                ck.err(path + ("operators", i), f"unknown operator '{o}' (operators: {', '.join(sorted(declared))})")
            elif o in owner:
                ck.err(path + ("operators", i), f"operator '{o}' already runs in node '{owner[o]}'")
            else:
                owner[o] = nname
        engine = ndef.get("engine", "python")
        if engine not in ENGINES:
            ck.err(path + ("engine",), f"'engine' must be one of {', '.join(ENGINES)}, got {engine!r}")
        elif engine == "spark" and (len(ops) != 1 or (ops[0] in operators and operators[ops[0]].type != "window")):
            ck.err(path + ("operators",), "a spark node runs exactly one window operator")
        elif engine == "spark" and ops[0] in operators and operators[ops[0]].count:
            ck.err(path + ("operators",), "a spark node runs a time window: a count window runs on engine: python")
        rec = _choice(ck, ndef, "reconciliation", path, tuple(Reconciliation), None)
        if engine == "spark" and rec is Reconciliation.UNDO:
            ck.err(
                path + ("reconciliation",),
                "a spark node reconciles by checkpoint/redo (its snapshots are lists of segments): "
                "remove 'reconciliation: undo'",
            )
        if "flush_ms" in ndef and engine != "spark":
            ck.err(path + ("flush_ms",), "'flush_ms' is a setting of spark nodes (engine: spark)")
        ha = _parse_ha(ck, ndef.get("ha"), path + ("ha",))
        runs = [s.value for s in Scheme if engine in s.kind.engines]  # none: an unknown engine, said above
        if runs and engine not in ha.scheme.kind.engines:
            ck.err(
                path + ("ha",),
                f"a {engine} node recovers by {' or '.join(runs)} only (its window state is a replica's own "
                f"segments), not by {ha.scheme.value}: remove 'ha' or use engine: python",
            )
        repl, flush_ms = ck.pos_int(ndef, "replicas", path, d_repl), ck.pos_int(ndef, "flush_ms", path, 1000)
        state, params = checkpoint.parse(ck, ndef, path, ha.scheme)
        processes = ck.pos_int(ndef, "processes", path, 1) if "processes" in ndef else None
        if processes is not None and engine == "spark":
            ck.err(path + ("processes",), "a spark node runs one process per partition (each its own Spark session)")
        out[nname] = NodeDef(nname, tuple(ops), repl, engine, rec, ha, flush_ms, state, processes, params)
    for o in declared:
        if o not in owner:
            ck.err(("operators", o), f"operator '{o}' is not placed in any node")
    return out
