"""Exchange edges: where a node reads a stream partitioned unlike itself (Flux §4.1's Exchange).

Partition i of a node writes partition i of its outputs, so a node has its output streams'
partition count. A stream read by a node of another partition count, or by a window or join
keyed by another field than the stream's key, crosses an exchange: its producer routes each
result to the consumer partition of its key (CRC32 of the key, ``services.core.partitioner``),
and each pair (producer partition j, consumer partition i) is a **connection**: partition i of
the topic ``<spec>.<stream>.p<j>.r<k>`` that replica k of producer partition j writes. A
connection is then a FIFO as the paper's network gives, with dense ids and boundaries of its
own: consumer partition i reads each as one more input (partition i of a topic of its own, as
any input), positions in it by id, switches upstream replicas and trims it as it does any
input, and merges its connections by tuple time (SUnion), so every replica orders them alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.core.codec import schema_fields

if TYPE_CHECKING:
    from services.spec.model import Spec

KEYED = ("window", "join")  # the operators whose state is per key


@dataclass(frozen=True)
class Exchange:
    """A stream as its reading node needs it: routed by ``key`` to ``consumers`` partitions."""

    stream: str
    node: str  # the node reading it
    key: str | None  # the field routed by; None when one consumer partition takes everything
    producers: int  # the stream's (its producing node's) partitions
    consumers: int  # the reading node's partitions


def connection_topic(spec: Spec, stream: str, producer: int, replica: int) -> str:
    """The topic replica ``replica`` of partition ``producer`` writes ``stream``'s connections to
    (one partition per consumer partition)."""
    node = spec.node_producing(stream)
    one_log = node is not None and node.ha.scheme.one_log
    return f"{spec.name}.{stream}.p{producer}" + ("" if one_log else f".r{replica}")


def output_name(stream: str, consumer: int) -> str:
    """How a producer names its connection to consumer partition ``consumer`` (an output of its own)."""
    return f"{stream}->{consumer}"


def input_name(stream: str, producer: int) -> str:
    """How a consumer names its connection from producer partition ``producer`` (an input of its own)."""
    return f"{stream}/{producer}"


def connection_topics(spec: Spec, ex: Exchange) -> list[str]:
    """Every topic of an exchanged stream: one per producer partition and output log."""
    logs = range(spec.logs_of_stream(ex.stream))
    return [connection_topic(spec, ex.stream, j, r) for j in range(ex.producers) for r in logs]


def node_partitions(spec: Spec, node: str) -> int:
    """A node's partition count: its output streams' (partition i of a node writes partition i)."""
    return spec.streams[spec.node_outputs(node)[0]].partitions


def readers(spec: Spec, stream: str) -> list[str]:
    """The nodes that read ``stream`` from Kafka, in name order."""
    return sorted({spec.node_of(op.name).name for op in spec.consumers_of(stream)} - _producer(spec, stream))


def wanted_key(spec: Spec, node: str, stream: str) -> str | None:
    """The field a window or join of ``node`` needs ``stream`` split by; None when none reads it."""
    for o in spec.nodes[node].operators:
        op = spec.operators[o]
        if op.type in KEYED:
            for s, k in zip(op.inputs, (op.key, op.right_key), strict=False):
                if s == stream and k is not None:
                    return k
    return None


def route_key(spec: Spec, node: str, stream: str) -> str | None:
    """The field ``stream`` is routed by to ``node``: the one its window or join needs, else the stream's key."""
    return wanted_key(spec, node, stream) or spec.streams[stream].key


def needs_exchange(spec: Spec, stream: str, node: str, split: str | None = None) -> bool:
    """Whether ``node`` reads ``stream`` partitioned otherwise than the stream is (``split``: the
    stream's ``split_by`` when the caller has it already, so a chain is walked once, not twice per hop)."""
    p, want = node_partitions(spec, node), wanted_key(spec, node, stream)
    if spec.streams[stream].partitions != p:
        return True
    return p > 1 and want is not None and (split if split is not None else split_by(spec, stream)) != want


def split_by(spec: Spec, stream: str) -> str | None:
    """The field whose CRC32 picks ``stream``'s partition: a source's key (its writers route by it),
    else what its operator keeps of the field its node is split by; None when nothing is known."""
    op = spec.producer_of(stream)
    if op is None:
        return spec.streams[stream].key
    node = spec.node_of(op.name).name
    ins = [inner_split(spec, node, s) for s in op.inputs]
    fields = schema_fields(spec.streams[stream].schema)
    if op.type == "window":
        return "key" if op.key is not None and ins[0] == op.key else None  # its results' ``key`` is str(key)
    if op.type in ("filter", "union"):
        return ins[0] if ins[0] in fields and all(i == ins[0] for i in ins) else None
    kept = {"map": (ins[0],), "join": (f"left.{ins[0]}", f"right.{ins[-1]}", ins[0])}[op.type]
    return next((f for f, e in op.fields.items() if e.strip() in kept), None)


def inner_split(spec: Spec, node: str, stream: str) -> str | None:
    """The field ``stream`` is split by within ``node``: the routing key where it crosses an
    exchange into it, else the stream's own ``split_by``."""
    producer, own = spec.node_producing(stream), split_by(spec, stream)
    if producer is not None and producer.name != node and needs_exchange(spec, stream, node, own):
        return route_key(spec, node, stream) if node_partitions(spec, node) > 1 else None
    return own


def exchange_of(spec: Spec, stream: str) -> Exchange | None:
    """The exchange ``stream`` crosses to the node reading it; None when it is read as it is
    partitioned (``problems`` refuses a stream its readers want split in different ways)."""
    if spec.node_producing(stream) is None:
        return None
    for n in readers(spec, stream):
        if needs_exchange(spec, stream, n):
            p = node_partitions(spec, n)
            return Exchange(
                stream, n, route_key(spec, n, stream) if p > 1 else None, spec.streams[stream].partitions, p
            )
    return None


def edges(spec: Spec) -> list[Exchange]:
    """Every exchange of the spec, in stream order."""
    return [ex for s in spec.streams if (ex := exchange_of(spec, s)) is not None]


def describe(spec: Spec, ex: Exchange) -> str:
    """One line for ``hastream validate``: who routes what to whom, by which key, over which topics."""
    producer = spec.node_producing(ex.stream)
    by = f"by CRC32 of '{ex.key}'" if ex.key is not None else "all to its one partition"
    pattern = connection_topic(spec, ex.stream, 0, 0).rsplit(".p0", 1)
    return (
        f"exchange {ex.stream}: {producer.name if producer else '?'} ({ex.producers} partitions) -> {ex.node} "
        f"({ex.consumers} partitions) {by}; {ex.producers * ex.consumers} connections, partition i of "
        f"{pattern[0]}.p<j>{pattern[1].replace('.r0', '.r<k>')} from producer partition j to i"
    )


def problems(spec: Spec) -> list[tuple[tuple, str]]:
    """Keyings a spec asks for that no exchange can give, each as (path, one line saying why)."""
    out: list[tuple[tuple, str]] = []
    for n in spec.nodes:
        parts = {s: spec.streams[s].partitions for s in spec.node_outputs(n)}
        if len(set(parts.values())) > 1:
            counts = ", ".join(f"{s}={p}" for s, p in parts.items())
            out.append(
                (
                    ("nodes", n),
                    f"outputs of node '{n}' have different partition counts ({counts}): partition i of a node writes partition i of each",
                )
            )
    for s in spec.streams:
        out.extend(_stream_problems(spec, s))
    return out


def _stream_problems(spec: Spec, stream: str) -> list[tuple[tuple, str]]:
    need = [n for n in readers(spec, stream) if needs_exchange(spec, stream, n)]
    if not need:
        return []
    sd, at = spec.streams[stream], ("streams", stream)
    n, p, key = need[0], node_partitions(spec, need[0]), route_key(spec, need[0], stream)
    if spec.node_producing(stream) is None:
        return [
            (
                at,
                f"source stream '{stream}' has {sd.partitions} partitions keyed by {sd.key!r}, and node '{n}' "
                f"needs {p} keyed by {key!r}: write the source so, or re-key it in a node before '{n}'",
            )
        ]
    if p > 1 and key is None:
        return [(at, f"node '{n}' reads stream '{stream}' in {p} partitions: give '{stream}' a 'key' to route it by")]
    others = [m for m in readers(spec, stream) if m != n]
    for m in others:
        if m not in need or node_partitions(spec, m) != p or route_key(spec, m, stream) != key:
            return [
                (
                    at,
                    f"nodes '{n}' and '{m}' need stream '{stream}' partitioned differently: give each its own stream (a map)",
                )
            ]
    if sd.egress:
        return [
            (
                at + ("egress",),
                f"stream '{stream}' is split into connections for node '{n}': put the egress on a stream no node re-keys",
            )
        ]
    return []


def _producer(spec: Spec, stream: str) -> set[str]:
    node = spec.node_producing(stream)
    return {node.name} if node is not None else set()
