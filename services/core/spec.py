"""The query network spec: streams, operators, nodes, replicas, partitions (YAML).

``load_spec`` returns a validated ``Spec`` or raises ``SpecError`` listing every mistake
as ``file:line:col: path: message``, one per line, so a user can fix them all at once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from services.core import expr
from services.core.codec import SchemaNotFound, load_schema, schema_fields

OPERATOR_TYPES = ("filter", "map", "union", "window", "join")
AGG_FUNCS = ("count", "sum", "avg", "min", "max")
ENGINES = ("python", "spark")
_AGG_RE = re.compile(r"^\s*(count|sum|avg|min|max)\s*(?:\(\s*([A-Za-z_][A-Za-z0-9_]*)?\s*\))?\s*$")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


class SpecError(ValueError):
    """Every problem found in a spec, one readable line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class StreamDef:
    name: str
    schema: str
    key: str | None = None
    partitions: int = 1
    delay: int | None = None  # X in ms for this output, end to end (None: the spec's dpc.delay)


RECONCILIATION = ("checkpoint", "undo")
FAILURE_POLICIES = ("process", "delay")
STABILIZATION_POLICIES = ("process", "delay", "suspend")


@dataclass(frozen=True)
class DpcConfig:
    """Delay-Process-Correct parameters (docs/dpc.md explains each)."""

    delay: int = 3000  # X: the maximum added delay of any output, ms, end to end
    alpha: float = 0.9  # share of a node's part of X that SUnion waits before going tentative
    bucket: int = 100  # SUnion bucket size, ms of tuple time
    boundary_interval: int = 100  # how often sources and nodes send BOUNDARY tuples, ms
    reconciliation: str = "checkpoint"  # default per node: checkpoint/redo or undo/redo
    failure_policy: str = "process"  # during UPSTREAM_FAILURE: process new tuples or delay them
    stabilization_policy: str = "process"  # while a replica reconciles: partner processes, delays, or all suspend
    checkpoint_interval: int = 2000  # persisted checkpoint period in STABLE, ms
    heartbeat_interval: int = 200  # ms
    failure_timeout: int = 1000  # a replica silent this long is failed, ms


@dataclass(frozen=True)
class Aggregate:
    """One output column of a window: ``func`` over ``field`` (None for count)."""

    out: str
    func: str
    field: str | None


@dataclass(frozen=True)
class OperatorDef:
    name: str
    type: str
    inputs: tuple[str, ...]
    output: str
    where: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    right_key: str | None = None
    time: str = "ts"
    size: int = 0
    slide: int = 0
    within: int = 0
    aggregates: tuple[Aggregate, ...] = ()


@dataclass(frozen=True)
class NodeDef:
    name: str
    operators: tuple[str, ...]
    replicas: int = 1
    engine: str = "python"
    reconciliation: str | None = None  # None: the spec's dpc.reconciliation


@dataclass
class Spec:
    name: str
    streams: dict[str, StreamDef]
    operators: dict[str, OperatorDef]
    nodes: dict[str, NodeDef]
    path: Path | None = None
    dpc: DpcConfig = field(default_factory=DpcConfig)

    # -- derived views -------------------------------------------------------
    def producer_of(self, stream: str) -> OperatorDef | None:
        for op in self.operators.values():
            if op.output == stream:
                return op
        return None

    def node_of(self, operator: str) -> NodeDef:
        for n in self.nodes.values():
            if operator in n.operators:
                return n
        raise KeyError(operator)

    def node_producing(self, stream: str) -> NodeDef | None:
        op = self.producer_of(stream)
        return self.node_of(op.name) if op else None

    def sources(self) -> list[str]:
        """Input streams: produced by clients, not by any operator."""
        return [s for s in self.streams if self.producer_of(s) is None]

    def consumers_of(self, stream: str) -> list[OperatorDef]:
        return [op for op in self.operators.values() if stream in op.inputs]

    def node_inputs(self, node: str) -> list[str]:
        """Streams a node reads from Kafka (produced outside it)."""
        n = self.nodes[node]
        produced = {self.operators[o].output for o in n.operators}
        seen: list[str] = []
        for o in n.operators:
            for s in self.operators[o].inputs:
                if s not in produced and s not in seen:
                    seen.append(s)
        return seen

    def node_outputs(self, node: str) -> list[str]:
        """Streams a node writes to Kafka: read by another node, or read by nobody (sinks)."""
        n = self.nodes[node]
        out = []
        for o in n.operators:
            s = self.operators[o].output
            readers = [c for c in self.consumers_of(s)]
            if not readers or any(c.name not in n.operators for c in readers):
                out.append(s)
        return out

    def node_partitions(self, node: str) -> int:
        return self.streams[self.node_inputs(node)[0]].partitions

    def sinks(self) -> list[str]:
        return [s for s in self.streams if self.producer_of(s) and not self.consumers_of(s)]

    def replicas_of_stream(self, stream: str) -> int:
        n = self.node_producing(stream)
        return n.replicas if n else 1

    def topic(self, stream: str, replica: int = 0) -> str:
        """Kafka topic of a stream: a source's own name; a node output's per-replica log."""
        return stream if self.producer_of(stream) is None else f"{stream}.r{replica}"

    def stream_topics(self, stream: str) -> list[str]:
        if self.producer_of(stream) is None:
            return [stream]
        n = self.node_producing(stream)
        if n is not None and stream not in self.node_outputs(n.name):
            return []  # internal to its node: never materialized
        return [self.topic(stream, r) for r in range(self.replicas_of_stream(stream))]

    @property
    def deadletter_topic(self) -> str:
        return f"{self.name}.deadletter"

    @property
    def heartbeat_topic(self) -> str:
        return f"{self.name}.heartbeats"

    @property
    def control_topic(self) -> str:
        return f"{self.name}.control"

    def checkpoint_topic(self, node: str, replica: int) -> str:
        return f"{self.name}.ckpt.{node}.r{replica}"

    def reconciliation_of(self, node: str) -> str:
        return self.nodes[node].reconciliation or self.dpc.reconciliation

    def path_nodes(self, stream: str) -> int:
        """Nodes on the longest path from a source to ``stream`` (0 for a source)."""
        n = self.node_producing(stream)
        if n is None:
            return 0
        return 1 + max((self.path_nodes(s) for s in self.node_inputs(n.name)), default=0)

    def downstream_sinks(self, node: str) -> list[str]:
        """Output streams read by no node that ``node`` contributes to."""
        out, todo, seen = [], list(self.node_outputs(node)), set()
        while todo:
            s = todo.pop()
            if s in seen:
                continue
            seen.add(s)
            readers = {self.node_of(c.name).name for c in self.consumers_of(s)} - {node}
            if not readers:
                out.append(s)
            for r in readers:
                todo.extend(self.node_outputs(r))
        return sorted(out)

    def node_delay_s(self, node: str) -> float:
        """The delay SUnion of ``node`` may add before processing tentatively: alpha * X / k.

        Each output's X is split evenly across the k nodes of its longest path, as in the
        paper, and a node serving several outputs takes the smallest share.
        """
        shares = [(self.streams[s].delay or self.dpc.delay) / self.path_nodes(s) for s in self.downstream_sinks(node)]
        return self.dpc.alpha * min(shares, default=self.dpc.delay) / 1000.0

    def all_topics(self) -> list[tuple[str, int]]:
        """Every topic of the deployment with its partition count."""
        out = [(t, s.partitions) for s in self.streams.values() for t in self.stream_topics(s.name)]
        out.append((self.deadletter_topic, 1))
        out.append((self.heartbeat_topic, 1))
        out.append((self.control_topic, 1))
        out.extend(self.checkpoint_topics())
        return out

    def checkpoint_topics(self) -> list[tuple[str, int]]:
        return [(self.checkpoint_topic(n, r), self.node_partitions(n))
                for n, nd in self.nodes.items() if nd.engine == "python" for r in range(nd.replicas)]

    def topo_nodes(self) -> list[str]:
        """Nodes in dataflow order (upstream first)."""
        order: list[str] = []
        deps = {n: {self.node_producing(s).name for s in self.node_inputs(n) if self.node_producing(s)} for n in self.nodes}
        while len(order) < len(deps):
            ready = [n for n in deps if n not in order and deps[n] <= set(order)]
            if not ready:
                raise SpecError(["nodes form a cycle"])
            order.extend(sorted(ready))
        return order

    def topo_operators(self, node: str) -> list[OperatorDef]:
        """A node's operators, each after the operators feeding it."""
        ops = [self.operators[o] for o in self.nodes[node].operators]
        done: set[str] = set(self.node_inputs(node))
        out: list[OperatorDef] = []
        while len(out) < len(ops):
            ready = [o for o in ops if o not in out and set(o.inputs) <= done]
            if not ready:
                raise SpecError([f"operators of node '{node}' form a cycle"])
            for o in ready:
                out.append(o)
                done.add(o.output)
        return out


# -- YAML with locations -------------------------------------------------------

def _to_python(node: yaml.Node, path: tuple, marks: dict[tuple, yaml.Mark]) -> Any:
    marks[path] = node.start_mark
    if isinstance(node, yaml.MappingNode):
        out = {}
        for k, v in node.value:
            key = yaml.safe_load(yaml.serialize(k)) if not isinstance(k, yaml.ScalarNode) else k.value
            marks[path + (key, "__key__")] = k.start_mark
            out[key] = _to_python(v, path + (key,), marks)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, path + (i,), marks) for i, v in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


class _Checker:
    """Collects problems with the location of the YAML node they refer to."""

    def __init__(self, source: str, marks: dict[tuple, yaml.Mark]) -> None:
        self.source = source
        self.marks = marks
        self.problems: list[str] = []

    def err(self, path: tuple, msg: str) -> None:
        mark = None
        for i in range(len(path), -1, -1):
            mark = self.marks.get(path[:i])
            if mark is not None:
                break
        loc = f"{self.source}:{mark.line + 1}:{mark.column + 1}" if mark else self.source
        dotted = ".".join(str(p) for p in path) or "(top)"
        self.problems.append(f"{loc}: {dotted}: {msg}")

    def mapping(self, obj: Any, path: tuple, what: str) -> dict:
        if obj is None:
            return {}
        if not isinstance(obj, dict):
            self.err(path, f"{what} must be a mapping, got {type(obj).__name__}")
            return {}
        return obj

    def unknown_keys(self, obj: dict, allowed: set[str], path: tuple) -> None:
        for k in obj:
            if k not in allowed:
                self.err(path + (k,), f"unknown key '{k}' (allowed: {', '.join(sorted(allowed))})")

    def pos_int(self, obj: dict, key: str, path: tuple, default: int | None = None, minimum: int = 1) -> int:
        v = obj.get(key, default)
        if v is None:
            self.err(path, f"'{key}' is required")
            return minimum
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            self.err(path + (key,), f"'{key}' must be an integer >= {minimum}, got {v!r}")
            return minimum
        return v

    def name_list(self, v: Any, path: tuple, what: str) -> list[str]:
        if isinstance(v, str):
            return [v]
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            return v
        self.err(path, f"{what} must be a name or a non-empty list of names")
        return []


_STREAM_KEYS = {"schema", "key", "partitions", "delay"}
_OP_KEYS = {
    "filter": {"type", "input", "output", "where"},
    "map": {"type", "input", "output", "fields"},
    "union": {"type", "inputs", "output"},
    "window": {"type", "input", "output", "key", "time", "size", "slide", "aggregates"},
    "join": {"type", "left", "right", "output", "key", "right_key", "time", "within", "fields"},
}
_NODE_KEYS = {"operators", "replicas", "engine", "reconciliation"}


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
    doc = _to_python(root, (), marks) if root is not None else None
    ck = _Checker(source, marks)
    top = ck.mapping(doc, (), "the spec")
    if doc is not None and not isinstance(doc, dict):
        raise SpecError(ck.problems)
    ck.unknown_keys(top, {"name", "defaults", "dpc", "streams", "operators", "nodes"}, ())
    name = top.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        ck.err(("name",), f"'name' must be a name of letters, digits, '-' or '_', got {name!r}")
        name = "hastream"
    defaults = ck.mapping(top.get("defaults"), ("defaults",), "defaults")
    ck.unknown_keys(defaults, {"partitions", "replicas"}, ("defaults",))
    d_parts = ck.pos_int(defaults, "partitions", ("defaults",), 1)
    d_repl = ck.pos_int(defaults, "replicas", ("defaults",), 1)

    streams = _parse_streams(ck, top, d_parts)
    operators = _parse_operators(ck, top, streams)
    declared = set(ck.mapping(top.get("operators"), ("operators",), "operators"))
    nodes = _parse_nodes(ck, top, operators, declared, d_repl)
    dpc = _parse_dpc(ck, top)
    spec = Spec(name, streams, operators, nodes, path, dpc)
    if not ck.problems:
        _check_graph(ck, spec)
    if ck.problems:
        raise SpecError(ck.problems)
    return spec


def _parse_dpc(ck: _Checker, top: dict) -> DpcConfig:
    raw = ck.mapping(top.get("dpc"), ("dpc",), "dpc")
    d = DpcConfig()
    ints = ("delay", "bucket", "boundary_interval", "checkpoint_interval", "heartbeat_interval", "failure_timeout")
    choices = {"reconciliation": RECONCILIATION, "failure_policy": FAILURE_POLICIES,
               "stabilization_policy": STABILIZATION_POLICIES}
    ck.unknown_keys(raw, set(ints) | set(choices) | {"alpha"}, ("dpc",))
    vals: dict[str, Any] = {k: ck.pos_int(raw, k, ("dpc",), getattr(d, k)) for k in ints}
    for k, allowed in choices.items():
        v = raw.get(k, getattr(d, k))
        if v not in allowed:
            ck.err(("dpc", k), f"'{k}' must be one of {', '.join(allowed)}, got {v!r}")
            v = getattr(d, k)
        vals[k] = v
    alpha = raw.get("alpha", d.alpha)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha <= 1:
        ck.err(("dpc", "alpha"), f"'alpha' must be a number in (0, 1], got {alpha!r}")
        alpha = d.alpha
    return DpcConfig(alpha=float(alpha), **vals)


def _parse_streams(ck: _Checker, top: dict, d_parts: int) -> dict[str, StreamDef]:
    raw = ck.mapping(top.get("streams"), ("streams",), "streams")
    if not raw:
        ck.err(("streams",), "at least one stream is required")
    out: dict[str, StreamDef] = {}
    for sname, sdef in raw.items():
        path = ("streams", sname)
        if not isinstance(sname, str) or not _NAME_RE.match(sname):
            ck.err(path, f"stream name {sname!r} must be letters, digits, '-' or '_'")
            continue
        sdef = ck.mapping(sdef, path, f"stream '{sname}'")
        ck.unknown_keys(sdef, _STREAM_KEYS, path)
        schema = sdef.get("schema")
        if not isinstance(schema, str):
            ck.err(path, "'schema' is required (a file stem in schemas/)")
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
        out[sname] = StreamDef(sname, schema, key, ck.pos_int(sdef, "partitions", path, d_parts), delay)
    return out


def _parse_aggregates(ck: _Checker, raw: Any, path: tuple, in_fields: dict) -> tuple[Aggregate, ...]:
    raw = ck.mapping(raw, path, "aggregates")
    if not raw:
        ck.err(path, "at least one aggregate is required, e.g. {count: count, total: sum(value)}")
    aggs = []
    for out, spec in raw.items():
        m = _AGG_RE.match(str(spec))
        if not m:
            ck.err(path + (out,), f"aggregate {spec!r} must be one of count, sum(f), avg(f), min(f), max(f)")
            continue
        func, fld = m.group(1), m.group(2)
        if func != "count" and not fld:
            ck.err(path + (out,), f"{func} needs a field: {func}(<field>)")
            continue
        if fld and fld not in in_fields:
            ck.err(path + (out,), f"unknown field '{fld}' (fields: {', '.join(in_fields)})")
            continue
        aggs.append(Aggregate(str(out), func, fld))
    return tuple(aggs)


def _parse_operators(ck: _Checker, top: dict, streams: dict[str, StreamDef]) -> dict[str, OperatorDef]:
    raw = ck.mapping(top.get("operators"), ("operators",), "operators")
    if not raw:
        ck.err(("operators",), "at least one operator is required")
    out: dict[str, OperatorDef] = {}
    outputs: dict[str, str] = {}
    for oname, odef in raw.items():
        path = ("operators", oname)
        odef = ck.mapping(odef, path, f"operator '{oname}'")
        otype = odef.get("type")
        if otype not in OPERATOR_TYPES:
            ck.err(path + ("type",) if "type" in odef else path, f"'type' must be one of {', '.join(OPERATOR_TYPES)}, got {otype!r}")
            continue
        ck.unknown_keys(odef, _OP_KEYS[otype], path)
        if otype == "union":
            inputs = ck.name_list(odef.get("inputs"), path + ("inputs",), "'inputs'")
        elif otype == "join":
            inputs = [odef.get("left"), odef.get("right")]
            for side in ("left", "right"):
                if not isinstance(odef.get(side), str):
                    ck.err(path, f"'{side}' (a stream name) is required")
        else:
            inputs = ck.name_list(odef.get("input"), path + ("input",), "'input'")
            if len(inputs) > 1:
                ck.err(path + ("input",), f"a {otype} reads one stream; use a union for several")
        output = odef.get("output")
        ok = True
        for i, s in enumerate(inputs):
            if isinstance(s, str) and s not in streams:
                ck.err(path + ({"union": "inputs", "join": ("left", "right")[min(i, 1)]}.get(otype, "input"),),
                       f"unknown stream '{s}' (streams: {', '.join(streams)})")
                ok = False
        if not isinstance(output, str):
            ck.err(path, "'output' (a stream name) is required")
            continue
        if output not in streams:
            ck.err(path + ("output",), f"unknown stream '{output}' (streams: {', '.join(streams)})")
            ok = False
        elif output in outputs:
            ck.err(path + ("output",), f"stream '{output}' is already the output of operator '{outputs[output]}'")
        elif output in inputs:
            ck.err(path + ("output",), f"operator reads and writes the same stream '{output}'")
        outputs.setdefault(output, oname)
        if not ok or any(not isinstance(s, str) for s in inputs):
            continue
        in_schema = streams[inputs[0]].schema
        in_fields = schema_fields(in_schema)
        out_schema = streams[output].schema
        out_fields = schema_fields(out_schema)
        required_out = {f["name"] for f in load_schema(out_schema)["fields"] if "default" not in f}
        kw: dict[str, Any] = {}
        if otype in ("filter", "union"):
            for s in inputs:
                if streams[s].schema != out_schema:
                    ck.err(path + ("output",), f"a {otype} keeps its input schema: '{s}' is '{streams[s].schema}' but '{output}' is '{out_schema}'")
        if otype == "filter":
            where = odef.get("where")
            if where is None:
                ck.err(path, "'where' (a predicate over the input fields) is required")
            else:
                try:
                    expr.validate(str(where), in_fields)
                except expr.ExprError as e:
                    ck.err(path + ("where",), str(e))
                kw["where"] = str(where)
        elif otype in ("map", "join"):
            fields = ck.mapping(odef.get("fields"), path + ("fields",), "fields")
            scopes: dict[str, Any] = (
                {"fields": in_fields} if otype == "map"
                else {"left": schema_fields(streams[inputs[0]].schema), "right": schema_fields(streams[inputs[1]].schema)}
            )
            for fname, fexpr in fields.items():
                if fname not in out_fields:
                    ck.err(path + ("fields", fname), f"field '{fname}' is not in output schema '{out_schema}' (fields: {', '.join(out_fields)})")
                    continue
                try:
                    expr.validate(str(fexpr), **scopes) if otype == "join" else expr.validate(str(fexpr), in_fields)
                except expr.ExprError as e:
                    ck.err(path + ("fields", fname), str(e))
            missing = required_out - set(fields)
            if fields and missing:
                ck.err(path + ("fields",), f"output schema '{out_schema}' also needs: {', '.join(sorted(missing))}")
            if not fields:
                ck.err(path, "'fields' (output field -> expression) is required")
            kw["fields"] = {str(k): str(v) for k, v in fields.items()}
        if otype in ("window", "join"):
            time_f = odef.get("time", "ts")
            for s in inputs:
                f = schema_fields(streams[s].schema)
                if time_f not in f or f[time_f] not in ("long", "int"):
                    ck.err(path + (("time",) if "time" in odef else ()), f"time field '{time_f}' must be a long field of '{s}'")
            kw["time"] = time_f
            key = odef.get("key")
            if not isinstance(key, str) or key not in in_fields:
                ck.err(path + (("key",) if "key" in odef else ()), f"'key' must name a field of '{inputs[0]}' (fields: {', '.join(in_fields)})")
            kw["key"] = key
        if otype == "window":
            kw["size"] = ck.pos_int(odef, "size", path)
            kw["slide"] = ck.pos_int(odef, "slide", path, kw["size"])
            if kw["slide"] > kw["size"]:
                ck.err(path + ("slide",), f"slide {kw['slide']} is larger than size {kw['size']}: tuples would fall between windows")
            elif kw["size"] % kw["slide"]:
                ck.err(path + ("slide",), f"size {kw['size']} must be a multiple of slide {kw['slide']}")
            aggs = _parse_aggregates(ck, odef.get("aggregates"), path + ("aggregates",), in_fields)
            kw["aggregates"] = aggs
            produced = {"key", "window_start", "window_end"} | {a.out for a in aggs}
            for f in sorted(produced - set(out_fields)):
                ck.err(path + ("aggregates",), f"window output field '{f}' is not in output schema '{out_schema}'")
            if required_out - produced:
                ck.err(path + ("aggregates",), f"output schema '{out_schema}' also needs: {', '.join(sorted(required_out - produced))}")
        if otype == "join":
            rk = odef.get("right_key", kw.get("key"))
            rf = schema_fields(streams[inputs[1]].schema)
            if rk not in rf:
                ck.err(path + ("right_key",) if "right_key" in odef else path, f"right key '{rk}' is not a field of '{inputs[1]}'")
            kw["right_key"] = rk
            kw["within"] = ck.pos_int(odef, "within", path, minimum=0)
        out[oname] = OperatorDef(oname, otype, tuple(inputs), output, **kw)
    return out


def _parse_nodes(
    ck: _Checker, top: dict, operators: dict[str, OperatorDef], declared: set[str], d_repl: int
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
        rec = ndef.get("reconciliation")
        if rec is not None and rec not in RECONCILIATION:
            ck.err(path + ("reconciliation",), f"'reconciliation' must be one of {', '.join(RECONCILIATION)}, got {rec!r}")
            rec = None
        out[nname] = NodeDef(nname, tuple(ops), ck.pos_int(ndef, "replicas", path, d_repl), engine, rec)
    for o in declared:
        if o not in owner:
            ck.err(("operators", o), f"operator '{o}' is not placed in any node")
    return out


def _check_graph(ck: _Checker, spec: Spec) -> None:
    """Cross-cutting checks: cycles, co-partitioning, keys of partitioned state."""
    try:
        spec.topo_nodes()
        for n in spec.nodes:
            spec.topo_operators(n)
    except SpecError as e:
        ck.err(("nodes",), e.problems[0])
        return
    for s in spec.streams:
        if spec.producer_of(s) is None and not spec.consumers_of(s):
            ck.err(("streams", s), f"stream '{s}' is neither produced nor read by any operator")
    for n in spec.nodes:
        ins = spec.node_inputs(n)
        parts = {spec.streams[s].partitions for s in ins}
        if len(parts) > 1:
            ck.err(("nodes", n), f"inputs of node '{n}' have different partition counts: "
                   + ", ".join(f"{s}={spec.streams[s].partitions}" for s in ins))
            continue
        p = parts.pop() if parts else 1
        for s in spec.node_outputs(n):
            if spec.streams[s].partitions != p:
                ck.err(("streams", s, "partitions"), f"stream '{s}' must have {p} partitions like the inputs of node '{n}' (partition i of a node writes partition i)")
        for o in spec.nodes[n].operators:
            op = spec.operators[o]
            if p > 1 and op.type in ("window", "join"):
                for s, k in zip(op.inputs, (op.key, op.right_key)):
                    if spec.streams[s].key != k:
                        ck.err(("operators", o, "key"), f"with {p} partitions, stream '{s}' must be keyed by '{k}' so each key's state lives in one partition (its key is {spec.streams[s].key!r})")
