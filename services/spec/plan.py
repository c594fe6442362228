"""The plan of one node: everything a replica of it needs from the spec, worked out once at start.

A node replica reads its plan, never the spec: inputs (which upstream node and replica
topics feed each), outputs (topic per replica, schema, key), its operators in dataflow
order, its delay share of X, its recovery scheme, its state store and the control-plane topics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from services.core.codec import schema_fields
from services.spec import exchanges
from services.spec.model import DpcConfig, HaDef, IngressDef, OperatorDef, Scheme, Spec
from services.spec.policies import Reconciliation
from services.spec.stores import STORES


@dataclass(frozen=True)
class InputPlan:
    """One stream a node reads from Kafka; ``index`` is its SUnion input number."""

    stream: str
    index: int
    schema: str
    upstream: str | None  # producing node, None for a source stream
    topics: tuple[str, ...]  # one per upstream replica
    ingress: IngressDef | None = None  # a raw stream of outside producers' records
    key: str | None = None  # the partition key field
    partitions: int = 1
    feeds: str = ""  # the stream the operators read it as ("": ``stream``); a connection's is its stream's
    connection: int | None = None  # across an exchange: the producer partition this connection comes from
    route: str | None = None  # across an exchange: the field its producer routed by (to ``fanout`` partitions)
    fanout: int = 1  # across an exchange: this node's partitions

    @property
    def replicas(self) -> int:
        return len(self.topics)

    @property
    def operand(self) -> str:
        """The stream name the node's operators read this input as."""
        return self.feeds or self.stream

    def upstream_partition(self, partition: int) -> int:
        """The producing node's partition whose replicas this input follows."""
        return partition if self.connection is None else self.connection


@dataclass(frozen=True)
class OutputPlan:
    """One stream a node writes to Kafka (every replica its own topic)."""

    stream: str
    schema: str
    key: str | None
    key_type: Any  # the key field's Avro type
    topics: tuple[str, ...]  # one per replica of this node
    feeds: str = ""  # the stream the operators write it as ("": ``stream``); a connection's is its stream's
    connection: int | None = None  # across an exchange: the consumer partition it goes to
    route: str | None = None  # across an exchange: the field whose CRC32 picks the consumer partition
    # Across an exchange, per partition of this node, its topics (one per replica): a connection is
    # partition ``connection`` of them (``services.spec.exchanges``).
    partition_topics: tuple[tuple[str, ...], ...] = ()

    @property
    def operand(self) -> str:
        """The stream name the node's operators write this output as."""
        return self.feeds or self.stream

    def topic(self, replica: int, partition: int) -> str:
        """The topic replica ``replica`` of node partition ``partition`` writes this output to."""
        return self.partition_topics[partition][replica] if self.partition_topics else self.topics[replica]

    def kafka_partition(self, partition: int) -> int:
        """The Kafka partition node partition ``partition`` writes (a connection's consumer partition)."""
        return partition if self.connection is None else self.connection


@dataclass(frozen=True)
class NodePlan:
    spec_name: str
    node: str
    replicas: int
    partitions: int
    scheme: Scheme
    reconciliation: Reconciliation
    inputs: tuple[InputPlan, ...]
    outputs: tuple[OutputPlan, ...]
    operators: tuple[OperatorDef, ...]  # each after the operators feeding it
    fields: dict[str, list[str]]  # stream -> field names, for every stream the operators touch
    delay_s: float  # SUnion's wait before going tentative (``Spec.node_delay_s``)
    hold_s: float  # SUnion's wait when it delays new tuples in a failure: alpha * X / k
    dpc: DpcConfig
    heartbeat_topic: str
    control_topic: str
    deadletter_topic: str
    restart_topics: tuple[str, ...]  # one per replica
    engine: str = "python"  # "spark": the window runs in Spark (``spark_jobs``)
    flush_ms: int = 1000  # a spark window's wait for its next Spark job
    ha: HaDef = HaDef()
    acks_topic: str = ""  # upstream backup's level-1 acknowledgements
    state: str | None = None  # its state store (``services.spec.stores``); None: its scheme keeps no state
    params: Mapping[str, int] = field(default_factory=dict, hash=False)  # the store's settings, defaults filled in

    @property
    def heartbeat_s(self) -> float:
        """How often a replica says it is alive: the HA schemes' keep-alive interval, or DPC's."""
        return self.dpc.heartbeat_interval / 1000 if self.scheme.kind.settings == "dpc" else self.ha.heartbeat_ms / 1000

    @property
    def detection_s(self) -> float:
        """How long a replica may stay silent before it counts as failed (and a stalled one may be replaced)."""
        return self.dpc.failure_timeout / 1000 if self.scheme.kind.settings == "dpc" else self.ha.detection_ms / 1000

    @property
    def in_order(self) -> bool:
        """One input, read as its log orders it: no serialization across inputs is needed
        (``services.dpc.sunion``). An ingress's raw records are ordered by time within its lateness."""
        return len(self.inputs) == 1 and self.inputs[0].ingress is None

    @property
    def timed_merge(self) -> bool:
        """A union or join of the node merges what a window or join emits as operator time moves:
        operator time must then move at the same points of every replica's input (bucket starts),
        or the merge would interleave alike results differently (``services.dpc.sunion.frontier``)."""
        timed: set[str] = set()
        for op in self.operators:  # in dataflow order: what feeds an operator is known before it
            if op.type in ("window", "join") or timed.intersection(op.inputs):
                timed.add(op.output)
            if len(op.inputs) > 1 and timed.intersection(op.inputs):
                return True
        return False

    def output(self, stream: str) -> OutputPlan:
        return next(o for o in self.outputs if o.stream == stream)

    def service_name(self, replica: int, partition: int) -> str:
        """The name of one process of the node (its consumer group, its dead letters' sender)."""
        return f"{self.spec_name}.{self.node}.r{replica}.p{partition}"


def plan_node(spec: Spec, node: str) -> NodePlan:
    """The plan of ``node``; raises ValueError naming the nodes if there is no such node."""
    if node not in spec.nodes:
        raise ValueError(f"no node '{node}' in spec (nodes: {', '.join(spec.nodes)})")
    nd = spec.nodes[node]
    inputs = [c for s in spec.node_inputs(node) for c in _input_plans(spec, s)]
    inputs = [replace(p, index=i) for i, p in enumerate(inputs)]
    outputs = [c for s in spec.node_outputs(node) for c in _output_plans(spec, s, nd.replicas)]
    ops = tuple(spec.topo_operators(node))
    touched = {s for o in ops for s in (*o.inputs, o.output)}
    return NodePlan(
        spec.name,
        node,
        nd.replicas,
        spec.node_partitions(node),
        nd.ha.scheme,
        spec.reconciliation_of(node),
        tuple(inputs),
        tuple(outputs),
        ops,
        {s: list(schema_fields(spec.streams[s].schema)) for s in sorted(touched)},
        _delay_s(spec, node, inputs),
        spec.node_hold_s(node) + _lateness_s(inputs),
        spec.dpc,
        spec.heartbeat_topic,
        spec.control_topic,
        spec.deadletter_topic,
        tuple(spec.restart_topic(node, r) for r in range(nd.replicas)),
        nd.engine,
        nd.flush_ms,
        nd.ha,
        spec.acks_topic,
        nd.store,
        {**STORES[nd.store].params, **nd.params} if nd.store else {},
    )


def _input_plans(spec: Spec, s: str) -> list[InputPlan]:
    """How a node reads stream ``s``: one input, or one per connection where it crosses an exchange."""
    up, sd, ex = spec.node_producing(s), spec.streams[s], exchanges.exchange_of(spec, s)
    logs = range(spec.logs_of_stream(s))
    one = InputPlan(
        s,
        0,
        sd.schema,
        up.name if up else None,
        tuple(spec.topic(s, r) for r in logs),
        sd.ingress,
        sd.key,
        sd.partitions,
    )
    if ex is None:
        return [one]
    return [
        replace(
            one,
            stream=exchanges.input_name(s, j),
            feeds=s,
            connection=j,
            route=ex.key,
            fanout=ex.consumers,
            topics=tuple(exchanges.connection_topic(spec, s, j, r) for r in logs),
        )
        for j in range(ex.producers)
    ]


def _output_plans(spec: Spec, s: str, replicas: int) -> list[OutputPlan]:
    """How a node writes stream ``s``: one output, or one per connection where it crosses an exchange."""
    sd, ex = spec.streams[s], exchanges.exchange_of(spec, s)
    key_type = schema_fields(sd.schema).get(sd.key) if sd.key else None
    one = OutputPlan(s, sd.schema, sd.key, key_type, tuple(spec.topic(s, r) for r in range(replicas)))
    if ex is None:
        return [one]
    by_partition = tuple(
        tuple(exchanges.connection_topic(spec, s, j, r) for r in range(replicas)) for j in range(ex.producers)
    )
    return [
        replace(
            one, stream=exchanges.output_name(s, i), feeds=s, connection=i, route=ex.key, partition_topics=by_partition
        )
        for i in range(ex.consumers)
    ]


def _delay_s(spec: Spec, node: str, inputs: list[InputPlan]) -> float:
    """SUnion's wait: the node's share of X, plus an ingress's lateness, which its input takes by
    design to reach a bucket's end (records may come that late); X counts from there on."""
    return spec.node_delay_s(node) + _lateness_s(inputs)


def _lateness_s(inputs: list[InputPlan]) -> float:
    return max((i.ingress.lateness for i in inputs if i.ingress is not None), default=0) / 1000
