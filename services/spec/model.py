"""The query network as data: streams, operators, nodes, DPC parameters, and the views derived from them.

``services.spec.parse`` builds a ``Spec`` from YAML and ``services.spec.validate`` checks it;
``services.spec.plan`` turns one node of it into the plan a node replica runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from services.core.errors import SpecError
from services.spec import exchanges
from services.spec.policies import Policy, Reconciliation
from services.spec.schemes import Recovery, Scheme

OPERATOR_TYPES = ("filter", "map", "union", "window", "join")
AGG_FUNCS = ("count", "sum", "avg", "min", "max")
ENGINES = ("python", "spark")


INTERNAL_TOPICS = ("deadletter", "heartbeats", "control")  # ``<spec>.<name>``: no stream may take these names
RAW_SUFFIX = ".raw"  # the topic outside producers write for a stream fed through an ingress
RECORD_TIMESTAMP = "timestamp"  # ingress ``time``: the Kafka record's timestamp, not a field


@dataclass(frozen=True)
class IngressDef:
    """How an ingress reads a raw topic written by any Kafka client (docs/spec.md, "ingress")."""

    format: str = "json"  # the raw values: "json" (one object) or "avro" (schemaless, the stream's schema)
    time: str = RECORD_TIMESTAMP  # a record's tuple time: the Kafka timestamp, or this field (ms)
    lateness: int = 1000  # ms a record may come after a newer one and still be taken
    idle: int | None = None  # ms without records after which time moves on with the clock (None: 1000 for
    # the record timestamp, off for a field, whose time need not be the clock's)
    replicas: int = 1

    @property
    def idle_ms(self) -> int:
        if self.idle is not None:
            return self.idle
        return 1000 if self.time == RECORD_TIMESTAMP else 0


@dataclass(frozen=True)
class EgressDef:
    """A plain topic of a node's output for any Kafka consumer (``services.spec.egress``)."""

    mode: str = "stable"  # "stable": each stable tuple once, in id order; "latest": the newest version per result
    format: str = "json"  # the record values: "json" (one object) or "avro" (schemaless, the stream's schema)
    topic: str | None = None  # None: ``<spec>.<stream>.<mode>``
    commit_ms: int = 100  # how often the egress commits its transaction: what it wrote becomes readable
    replicas: int = 1
    heartbeat_ms: int = 100  # its replicas' keep-alive interval: the coordinator fails one silent for 3 of them

    @property
    def detection_ms(self) -> int:
        """How long the coordinator waits without a keep-alive before it fails an egress replica."""
        return 3 * self.heartbeat_ms


@dataclass(frozen=True)
class StreamDef:
    name: str
    schema: str
    key: str | None = None
    partitions: int = 1
    delay: int | None = None  # X in ms for this output, end to end (None: the spec's dpc.delay)
    ingress: IngressDef | None = None  # set on a raw stream: outside producers write it, an ingress reads it
    topic: str | None = None  # a source's own topic, shared with others (None: the deployment's ``<spec>.<stream>``)
    egress: tuple[EgressDef, ...] = ()  # the plain topics of this output, one per mode


class Merge(str, Enum):
    """How a node takes tuples from several inputs: in tuple-time order (SUnion's serialization), the one
    order hastream runs, which keeps replicas identical; ``merge: arrival`` is refused (``services.spec.parse``)."""

    TIME = "time"


@dataclass(frozen=True)
class HaDef:
    """A node's ``ha:``: its scheme and that scheme's settings (docs/spec.md, "ha")."""

    scheme: Scheme = Scheme.DPC
    recovery: Recovery | None = None  # None: gap for amnesia, rollback for the other HA schemes
    interval_ms: int = 50  # M: how often checkpoints, acknowledgements or trims go out
    heartbeat_ms: int = 100  # an HA node's keep-alive interval
    misses: int = 3  # keep-alives missed before the node is failed (detection: about misses - 0.5 intervals)
    merge: Merge = Merge.TIME

    @property
    def detection_ms(self) -> int:
        """How long the coordinator waits without a keep-alive before it fails a replica."""
        return self.misses * self.heartbeat_ms

    @property
    def guarantee(self) -> Recovery:
        if self.recovery is not None:
            return self.recovery
        return self.scheme.kind.recovery or Recovery.ROLLBACK


@dataclass(frozen=True)
class DpcConfig:
    """Delay-Process-Correct parameters (docs/dpc.md explains each)."""

    delay: int = 3000  # X: the maximum added delay of any output, ms, end to end
    alpha: float = 0.9  # share of a node's part of X that SUnion waits before going tentative
    bucket: int = 100  # SUnion bucket size, ms of tuple time
    boundary_interval: int = 100  # how often sources and nodes send BOUNDARY tuples, ms
    reconciliation: Reconciliation = Reconciliation.CHECKPOINT  # default per node
    failure_policy: Policy = Policy.PROCESS  # during UPSTREAM_FAILURE: process new tuples or delay them
    stabilization_policy: Policy = (
        Policy.PROCESS
    )  # while a replica reconciles: partner processes, delays, or all suspend
    restart_image_interval: int = 2000  # how often a STABLE replica writes its restart image, ms
    heartbeat_interval: int = 200  # ms
    failure_timeout: int = 1000  # a replica silent this long is failed, ms
    max_kept: int = 100_000  # input tuples a failure keeps in memory for its redo; past it, redo reads the logs


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
    count: int = 0  # a count-based window's tuples per window (0: a time window, ``size`` and ``slide``)
    within: int = 0
    aggregates: tuple[Aggregate, ...] = ()


@dataclass(frozen=True)
class NodeDef:
    name: str
    operators: tuple[str, ...]
    replicas: int = 1
    engine: str = "python"
    reconciliation: Reconciliation | None = None  # None: the spec's dpc.reconciliation
    ha: HaDef = HaDef()
    flush_ms: int = 1000  # a spark node's window: how long decided results wait for the next Spark job
    state: str | None = None  # its ``state:``, a store of ``services.spec.stores``; None: its scheme's default
    processes: int | None = None  # processes per replica, each hosting some partitions (None: one per partition)
    params: Mapping[str, int] = field(default_factory=dict, hash=False)  # its store's settings (``checkpoint:``)

    @property
    def store(self) -> str | None:
        """The state store its recovery points go to; None: its scheme keeps no state."""
        return self.state if self.state is not None else self.ha.scheme.kind.store


@dataclass
class Spec:
    name: str
    streams: dict[str, StreamDef]
    operators: dict[str, OperatorDef]
    nodes: dict[str, NodeDef]
    path: Path | None = None
    dpc: DpcConfig = field(default_factory=DpcConfig)
    schemas: Path | None = None  # the directory of the spec's own Avro schemas (``schemas:``), if any

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

    def raw_of(self, stream: str) -> StreamDef | None:
        """The raw stream outside producers write when ``stream`` is fed through an ingress."""
        return self.streams.get(stream + RAW_SUFFIX)

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
        return exchanges.node_partitions(self, node)

    def node_processes(self, node: str) -> int:
        """How many processes run each replica of ``node``: its ``processes:``, else one per partition."""
        return self.nodes[node].processes or self.node_partitions(node)

    def topic_partitions(self, stream: str) -> int:
        """Partitions of each topic of ``stream``: one per consumer partition where it crosses an exchange."""
        ex = exchanges.exchange_of(self, stream)
        return ex.consumers if ex is not None else self.streams[stream].partitions

    def sinks(self) -> list[str]:
        return [s for s in self.streams if self.producer_of(s) and not self.consumers_of(s)]

    def replicas_of_stream(self, stream: str) -> int:
        n = self.node_producing(stream)
        return n.replicas if n else 1

    def logs_of_stream(self, stream: str) -> int:
        """How many output logs a stream has: one per replica of its node, or one for a one-log scheme."""
        n = self.node_producing(stream)
        return 1 if n is None or n.ha.scheme.one_log else n.replicas

    def topic(self, stream: str, replica: int = 0) -> str:
        """Kafka topic of a stream, in the deployment's namespace: ``<spec>.<stream>`` for a source
        (unless it names a shared ``topic:``) or the output of a one-log scheme (``Scheme.one_log``),
        ``<spec>.<stream>.r<k>`` for replica k's output log."""
        n = self.node_producing(stream)
        if n is None:
            return self.streams[stream].topic or f"{self.name}.{stream}"
        if n.ha.scheme.one_log:
            return f"{self.name}.{stream}"
        return f"{self.name}.{stream}.r{replica}"

    def stream_topics(self, stream: str) -> list[str]:
        if self.producer_of(stream) is None:
            return [self.topic(stream)]
        n = self.node_producing(stream)
        if n is not None and stream not in self.node_outputs(n.name):
            return []  # internal to its node: never materialized
        if (ex := exchanges.exchange_of(self, stream)) is not None:
            return exchanges.connection_topics(self, ex)
        return [self.topic(stream, r) for r in range(self.logs_of_stream(stream))]

    def readable_topics(self, stream: str) -> list[str]:
        """The topics a client reads for ``stream`` (one per replica); ValueError says why there are none."""
        if stream not in self.streams:
            raise ValueError(f"no stream '{stream}' in spec (streams: {', '.join(self.streams)})")
        topics = self.stream_topics(stream)
        if not topics:
            node = self.node_producing(stream)
            raise ValueError(
                f"stream '{stream}' is internal to node '{node.name if node else '?'}' and not written to Kafka"
            )
        return topics

    @property
    def deadletter_topic(self) -> str:
        return f"{self.name}.deadletter"

    @property
    def heartbeat_topic(self) -> str:
        return f"{self.name}.heartbeats"

    @property
    def control_topic(self) -> str:
        return f"{self.name}.control"

    @property
    def acks_topic(self) -> str:
        """Upstream backup's level-1 acknowledgements (``services.ha.acks``), compacted: each primary's newest."""
        return f"{self.name}.ha.acks"

    def restart_topic(self, node: str, replica: int) -> str:
        """Where a node replica keeps its restart image (one message per partition, the newest wins);
        one for every replica of a one-log scheme (passive standby's checkpoints, read at a takeover)."""
        if self.nodes[node].ha.scheme.one_log:
            return f"{self.name}.restart.{node}"
        return f"{self.name}.restart.{node}.r{replica}"

    def reconciliation_of(self, node: str) -> Reconciliation:
        """A spark node always reconciles by checkpoint/redo: its snapshots are lists of segments."""
        nd = self.nodes[node]
        if nd.engine == "spark":
            return Reconciliation.CHECKPOINT
        return nd.reconciliation or self.dpc.reconciliation

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
        """How long SUnion of ``node`` waits before it processes tentatively.

        Under the "process" failure policy a node does not hold tentative input again, so of
        the nodes on a path only the first to miss an input waits: each node may spend the
        whole alpha * X (the paper's Process & Process delay is alpha * X plus processing).
        Under "delay" every node on the path holds again, so each waits its ``node_hold_s``.
        A node serving several outputs takes the smallest X.
        """
        if self.dpc.failure_policy == "delay":
            return self.node_hold_s(node)
        xs = [self.streams[s].delay or self.dpc.delay for s in self.downstream_sinks(node)]
        return self.dpc.alpha * min(xs, default=self.dpc.delay) / 1000.0

    def node_hold_s(self, node: str) -> float:
        """How long ``node`` holds a bucket when it delays new tuples (the "delay" policies), which
        every node on a path does in turn: alpha * X / k, X split evenly over the k nodes of the
        longest path to each output, as in the paper."""
        shares = [(self.streams[s].delay or self.dpc.delay) / self.path_nodes(s) for s in self.downstream_sinks(node)]
        return self.dpc.alpha * min(shares, default=self.dpc.delay) / 1000.0

    def topo_nodes(self) -> list[str]:
        """Nodes in dataflow order (upstream first)."""
        order: list[str] = []
        deps = {
            n: {up.name for s in self.node_inputs(n) if (up := self.node_producing(s)) is not None} for n in self.nodes
        }
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
