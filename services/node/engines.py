"""Which engine runs a node's operators: Python in the node's process, or Spark for a spark node's window.

Only a spark node imports ``spark_jobs`` (and with it pyspark and a JVM).
"""

from __future__ import annotations

from services.node.pipeline import Build
from services.operators.build import build_operator
from services.spec.plan import NodePlan


def operator_builder(plan: NodePlan, replica: int, partition: int) -> Build:
    if plan.engine == "spark":
        from spark_jobs.plan import spark_operator

        return lambda op, fields: spark_operator(plan, replica, partition, op)
    return build_operator
