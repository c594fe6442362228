"""The window operator of a Spark node replica partition, built from the node's plan.

A node with ``engine: spark`` runs the ordinary node service (``services.node``); the node
asks this module for its operator instead of ``services.operators.build``. The replica
partition gets its own checkpoint folder, ``<root>/<spec>/<node>.r<replica>.p<partition>``,
under ``$HASTREAM_SPARK_CHECKPOINTS`` (default ``$HASTREAM_HOME/spark/checkpoints``): put
the root on shared storage, and a replica restarted on another host continues from its
restart image.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from services.core.codec import schema_fields
from services.core.paths import hastream_home
from services.operators.base import Operator
from services.spec import OperatorDef
from services.spec.plan import NodePlan
from spark_jobs.segments import SegmentStore
from spark_jobs.session import StageError, spark_session
from spark_jobs.window import SparkWindow

CHECKPOINTS_ENV = "HASTREAM_SPARK_CHECKPOINTS"


def checkpoint_root() -> Path:
    """Where Spark nodes keep their segments: ``$HASTREAM_SPARK_CHECKPOINTS`` or under the home."""
    root = os.environ.get(CHECKPOINTS_ENV, "")
    return Path(root) if root else hastream_home() / "spark" / "checkpoints"


def checkpoint_folder(plan: NodePlan, replica: int, partition: int) -> Path:
    return checkpoint_root() / plan.spec_name / f"{plan.node}.r{replica}.p{partition}"


def spark_operator(plan: NodePlan, replica: int, partition: int, op: OperatorDef) -> Operator:
    """The Spark window for ``op`` (a spark node runs exactly one window operator)."""
    if op.type != "window" or op.key is None:
        raise StageError(f"node '{plan.node}': a spark node runs exactly one keyed window operator, not '{op.name}'")
    schema = next(i.schema for i in plan.inputs if i.operand == op.inputs[0])
    folder = checkpoint_folder(plan, replica, partition)
    spark = spark_session(f"hastream-{plan.spec_name}-{plan.node}-r{replica}-p{partition}")

    def store_at(columns: pa.Schema) -> SegmentStore:
        return SegmentStore(folder, columns)

    try:
        window = SparkWindow(
            op.name,
            op.key,
            op.time,
            op.size,
            op.slide,
            op.aggregates,
            schema_fields(schema),
            store_at,
            spark,
            plan.flush_ms,
        )
    except ValueError as e:
        raise StageError(f"node '{plan.node}': {e}") from None
    window.warm_up()
    return window
