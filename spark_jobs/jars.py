"""The Spark connector jars (Kafka source/sink, Avro) fetched once with Maven.

pyspark's wheel ships Spark itself but not the Kafka and Avro connectors. Resolving them
with ``--packages`` would need Ivy at every session start (and network access); instead
``infra/spark/pom.xml`` lists exactly the missing jars, Maven copies them once into
``jars_dir("spark")``, and sessions get them through ``spark.jars``.
"""

from __future__ import annotations

from pathlib import Path

from infra.maven import MavenError, fetch_jars, pom_properties
from services.core.errors import HastreamError
from services.core.paths import REPO_ROOT, jars_dir

POM_PATH = REPO_ROOT / "infra" / "spark" / "pom.xml"
# Jars whose absence means the copy is unusable (checked after Maven ran and on every call).
REQUIRED_PREFIXES = (
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    "commons-pool2-",
    "spark-avro_",
)


class SparkJarsError(HastreamError, RuntimeError):
    """The connector jars could not be fetched; the message is one line saying why."""


SPARK_VERSION: str = pom_properties(POM_PATH).get("spark.version", "unknown")


def ensure_spark_jars() -> list[Path]:
    """Paths of the connector jars for ``spark.jars``, running Maven on first use only."""
    try:
        return fetch_jars(POM_PATH, jars_dir("spark"), f"Spark {SPARK_VERSION} connector jars", REQUIRED_PREFIXES)
    except MavenError as e:
        raise SparkJarsError(str(e)) from None
