"""The plan of one Spark stage replica: everything it needs from the spec, worked out once at start.

The session, query and sink read the plan, never the spec: the input topic it reads, the
output topic and partition count it writes, its one window operator, and the names that
identify the replica (Spark app, streaming query, checkpoint folder). It mirrors
``services.spec.plan.NodePlan`` for the one shape a spark node has.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.core.codec import schema_fields
from services.core.errors import HastreamError
from services.core.paths import hastream_home
from services.spec import Aggregate, OperatorDef, Spec


class StageError(HastreamError, RuntimeError):
    """A stage that cannot start or that failed; the message is one line."""


@dataclass(frozen=True)
class WindowPlan:
    """The node's one window operator: keyed, event-timed, ``[s, s + size)`` every ``slide`` ms."""

    name: str
    key: str  # input field the windows are keyed by
    key_type: Any  # the key field's Avro type
    time: str  # input field holding the event time (ms)
    size: int
    slide: int
    aggregates: tuple[Aggregate, ...]

    @property
    def produced(self) -> set[str]:
        """Output fields the window computes; the output schema's others take their defaults."""
        return {"key", "window_start", "window_end"} | {a.out for a in self.aggregates}


@dataclass(frozen=True)
class StagePlan:
    """What one replica of a spark node reads, computes and writes."""

    spec_name: str
    node: str
    replica: int
    window: WindowPlan
    input_topic: str
    output_topic: str
    in_schema: str
    out_schema: str
    partitions: int  # of the output topic

    @property
    def app_name(self) -> str:
        """Name of the Spark application a stage that owns its session starts."""
        return f"hastream-{self.spec_name}-{self.node}-r{self.replica}"

    @property
    def query_name(self) -> str:
        """Name of the streaming query, unique per replica within a session."""
        return f"{self.spec_name}.{self.node}.r{self.replica}"


def plan_stage(spec: Spec, node: str, replica: int = 0) -> StagePlan:
    """Resolve topics, schemas and window of a spark node replica; StageError if it is not one."""
    op = _window_operator(spec, node, replica)
    src = op.inputs[0]
    return StagePlan(
        spec_name=spec.name,
        node=node,
        replica=replica,
        window=_window_plan(op, spec.streams[src].schema),
        input_topic=spec.topic(src, replica % spec.replicas_of_stream(src)),
        output_topic=spec.topic(op.output, replica),
        in_schema=spec.streams[src].schema,
        out_schema=spec.streams[op.output].schema,
        partitions=spec.streams[op.output].partitions,
    )


def default_checkpoint(plan: StagePlan) -> Path:
    """Where a replica keeps its Spark checkpoint unless told otherwise."""
    return hastream_home() / "spark" / "checkpoints" / plan.spec_name / f"{plan.node}.r{plan.replica}"


def _window_operator(spec: Spec, node: str, replica: int) -> OperatorDef:
    """The one window operator of a spark node replica; StageError naming what does not fit."""
    if node not in spec.nodes:
        raise StageError(f"no node '{node}' in spec '{spec.name}' (nodes: {', '.join(spec.nodes)})")
    nd = spec.nodes[node]
    if nd.engine != "spark":
        raise StageError(f"node '{node}' has engine '{nd.engine}'; the Spark stage runs only nodes with engine: spark")
    if not 0 <= replica < nd.replicas:
        raise StageError(f"node '{node}' has {nd.replicas} replica(s); replica {replica} does not exist")
    op = spec.operators[nd.operators[0]]
    if op.type != "window" or len(nd.operators) != 1:
        raise StageError(f"node '{node}' must run exactly one window operator")
    return op


def _window_plan(op: OperatorDef, in_schema: str) -> WindowPlan:
    # A parsed spec always names the key of a window; a spec built in code might not.
    if op.key is None:
        raise StageError(f"window operator '{op.name}' has no key")
    return WindowPlan(
        name=op.name,
        key=op.key,
        key_type=schema_fields(in_schema)[op.key],
        time=op.time,
        size=op.size,
        slide=op.slide,
        aggregates=op.aggregates,
    )
