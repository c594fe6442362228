"""``egress:`` on a node's output stream: plain topics of it that any Kafka consumer reads exactly once.

hastream's own logs carry what its readers need (the ``ht`` header, control tuples, tentative
results, one log per replica, epochs); a consumer outside hastream wants none of that. An
egress follows the stream as hastream's readers do and writes, transactionally:

- ``mode: stable`` (the default): every stable tuple once, in id order per partition, as a
  plain record, to ``<spec>.<stream>.stable``;
- ``mode: latest``: a compacted topic of the newest version of each result (tentative values
  as they come, then the stable one), ``<spec>.<stream>.latest``.

``egress: true`` takes every default; a list gives one egress per mode. Each may name its own
``topic:``, its values' ``format:`` (json or avro), ``commit_ms`` (how often what it wrote becomes
readable) and ``replicas``.
"""

from __future__ import annotations

from typing import Any

from services.spec.model import INTERNAL_TOPICS, EgressDef, Spec
from services.spec.problems import Problems

MODES = ("stable", "latest")
FORMATS = ("json", "avro")
_KEYS = {"mode", "format", "topic", "commit_ms", "replicas", "heartbeat_ms"}


def parse(ck: Problems, raw: Any, path: tuple, d_repl: int) -> tuple[EgressDef, ...]:
    """A stream's ``egress:``: ``true``, one mapping, or a list of them (one per mode)."""
    if raw is False or raw is None:
        return ()
    items = list(enumerate(raw)) if isinstance(raw, list) else [(None, raw)]
    out: list[EgressDef] = []
    for i, item in items:
        at = path if i is None else path + (i,)
        e = _parse_one(ck, {} if item is True else ck.mapping(item, at, "'egress'"), at, d_repl)
        if e is None:
            continue
        if any(o.mode == e.mode for o in out):
            ck.err(at + ("mode",), f"a second '{e.mode}' egress: one egress per mode")
            continue
        out.append(e)
    return tuple(out)


def _parse_one(ck: Problems, obj: dict, at: tuple, d_repl: int) -> EgressDef | None:
    ck.unknown_keys(obj, _KEYS, at)
    d = EgressDef(replicas=d_repl)
    mode, fmt = obj.get("mode", d.mode), obj.get("format", d.format)
    if mode not in MODES:
        ck.err(at + ("mode",), f"'mode' must be {' or '.join(MODES)}, got {mode!r}")
        return None
    if fmt not in FORMATS:
        ck.err(at + ("format",), f"'format' must be {' or '.join(FORMATS)}, got {fmt!r}")
        return None
    topic = ck.topic(obj, at)
    commit_ms = ck.pos_int(obj, "commit_ms", at, d.commit_ms)
    replicas, heartbeat_ms = (
        ck.pos_int(obj, "replicas", at, d.replicas),
        ck.pos_int(obj, "heartbeat_ms", at, d.heartbeat_ms),
    )
    return EgressDef(str(mode), str(fmt), topic, commit_ms, replicas, heartbeat_ms)


def egress_node(stream: str, mode: str) -> str:
    """The name an egress goes by where nodes go by theirs (heartbeats, role orders, processes)."""
    return f"egress_{stream}_{mode}"


def egress_units(spec: Spec) -> dict[str, tuple[str, EgressDef]]:
    """Every egress by its name (``egress_node``): the stream it follows and its definition."""
    return {egress_node(s, e.mode): (s, e) for s, sd in spec.streams.items() for e in sd.egress}


def replicated(spec: Spec) -> list[tuple[str, int, int]]:
    """(name, replicas, partitions) of everything that runs as replica partition processes: the nodes,
    upstream first, then the egresses."""
    units = [(n, spec.nodes[n].replicas, spec.node_partitions(n)) for n in spec.topo_nodes()]
    return units + [(n, e.replicas, spec.streams[s].partitions) for n, (s, e) in egress_units(spec).items()]


def egress_topic(spec: Spec, stream: str, egress: EgressDef) -> str:
    """The topic an egress of ``stream`` writes."""
    return egress.topic or f"{spec.name}.{stream}.{egress.mode}"


def transactional_prefix(spec: Spec, stream: str, egress: EgressDef) -> str:
    """What the transactional ids of every partition of an egress start with (its writers' ACLs)."""
    return f"hastream.{spec.name}.egress.{stream}.{egress.mode}.p"


def transactional_id(spec: Spec, stream: str, egress: EgressDef, partition: int) -> str:
    """The id every writer of one egress partition shares, so that a new one fences the old."""
    return f"{transactional_prefix(spec, stream, egress)}{partition}"


def check(ck: Problems, spec: Spec) -> None:
    """Each egress is on a stream a node writes to Kafka, and its topic is no other stream's or egress's."""
    taken = {f"{spec.name}.{t}": "the deployment's own" for t in INTERNAL_TOPICS}
    taken.update({t: f"stream '{s}''s" for s in spec.streams for t in spec.stream_topics(s)})
    for name, sd in spec.streams.items():
        path = ("streams", name, "egress")
        if sd.egress:
            _check_written(ck, spec, name, path)
        for e in sd.egress:
            if egress_node(name, e.mode) in spec.nodes:
                ck.err(path, f"'{egress_node(name, e.mode)}' is this egress's name: rename the node")
            t = egress_topic(spec, name, e)
            if t in taken:
                ck.err(path, f"topic '{t}' is already {taken[t]}: give this egress a 'topic:' of its own")
            taken[t] = f"stream '{name}''s {e.mode} egress's"


def _check_written(ck: Problems, spec: Spec, stream: str, path: tuple) -> None:
    node = spec.node_producing(stream)
    if node is None:
        ck.err(path, f"stream '{stream}' is an input (no operator writes it): 'egress' goes on a stream a node writes")
    elif not spec.stream_topics(stream):
        outputs = ", ".join(spec.node_outputs(node.name))
        ck.err(
            path,
            f"stream '{stream}' is internal to node '{node.name}' (never written to Kafka): "
            f"put 'egress' on one of its outputs ({outputs})",
        )


def egress_topics(spec: Spec) -> list[tuple[str, str, int, dict[str, str]]]:
    """(stream, topic, partitions, settings) of every egress: a ``latest`` topic is compacted, so it
    keeps the newest version of each result for good."""
    out = []
    for name, sd in spec.streams.items():
        for e in sd.egress:
            config = {"cleanup.policy": "compact"} if e.mode == "latest" else {}
            out.append((name, egress_topic(spec, name, e), sd.partitions, config))
    return out
