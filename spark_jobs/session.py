"""The local Spark session a stage runs in: connector jars, quiet logs, streaming settings.

One session can run several stages (tests pay for one JVM); what a stage needs of a session
it did not build is set again with ``use_kafka_v1_source``.
"""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

from services.core.kafka import env_login, group_id, java_client_conf
from services.core.paths import hastream_home
from spark_jobs.jars import SparkJarsError, ensure_spark_jars
from spark_jobs.plan import StageError

# Read Kafka through the DSv1 source: Spark 4.1.1's DSv2 Kafka stream fails with a
# NullPointerException in its progress metrics (SPARK-55271) whenever a restarted query
# re-runs a batch that was planned but not committed, i.e. on every recovery after a crash.
_DISABLE_V2_KAFKA = (
    "spark.sql.streaming.disabledV2MicroBatchReaders",
    "org.apache.spark.sql.kafka010.KafkaSourceProvider",
)

_LOG4J2 = """\
# Written by spark_jobs.session: a stage logs warnings and errors only.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
# "non-nullable Avro schema and nullable catalyst schema": aggregates of non-null fields are never null.
logger.avroser.name = org.apache.spark.sql.avro.AvroSerializer
logger.avroser.level = error
# "Current batch is falling behind" after every micro-batch longer than the trigger interval.
logger.trigger.name = org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor
logger.trigger.level = error
# "Failed to cancel job group" when a query is stopped between batches.
logger.dag.name = org.apache.spark.scheduler.DAGScheduler
logger.dag.level = error
"""


def spark_session(
    app_name: str = "hastream-window-stage", shuffle_partitions: int = 2, master: str = "local[2]"
) -> SparkSession:
    """A local session with the connector jars on its classpath (no Ivy, no UI, quiet logs).

    ``spark.jars`` only takes effect when the JVM starts, so an already running session
    without the connectors is an error rather than a confusing "kafka source not found" later.
    """
    try:
        jars = ensure_spark_jars()
    except SparkJarsError as e:
        raise StageError(str(e)) from None
    log4j = _log4j_conf()
    # Read by the JVM launcher: without it Spark warns that the hostname resolves to loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = _builder(app_name, master, shuffle_partitions, jars, log4j)
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # no java, JVM failed to start, ...
        raise StageError(f"could not start Spark: {one_line(e)}") from None
    spark.sparkContext.setLogLevel("WARN")
    _check_jars(spark, jars)
    return spark


def kafka_options(reader: bool) -> dict[str, str]:
    """The Kafka source's (``reader``) or sink's options for the environment's SASL login: the
    stage's Java clients log in as the node replica, like the Python ones (none without a login).
    A reader's consumer groups get hastream's prefix, which the replica's ACLs let it describe."""
    login = env_login()
    if login is None:
        return {}
    opts = {f"kafka.{k}": v for k, v in java_client_conf(login).items()}
    return {**opts, "groupIdPrefix": group_id("spark")} if reader else opts


def use_kafka_v1_source(spark: SparkSession) -> None:
    """Make a session read Kafka through the DSv1 source, also one the stage did not build."""
    spark.conf.set(*_DISABLE_V2_KAFKA)


def one_line(e: BaseException) -> str:
    """The first line of an error, Spark's (whose ``desc`` holds the JVM message) or Python's."""
    text = str(getattr(e, "desc", None) or e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def _log4j_conf() -> Path:
    """The stage's log4j2 configuration file, rewritten only when its text changed."""
    conf_dir = hastream_home() / "spark"
    conf_dir.mkdir(parents=True, exist_ok=True)
    log4j = conf_dir / "log4j2.properties"
    if not log4j.is_file() or log4j.read_text() != _LOG4J2:
        tmp = conf_dir / f".log4j2.properties.{os.getpid()}"
        tmp.write_text(_LOG4J2)
        tmp.replace(log4j)  # atomic: concurrent stages never read a half-written file
    return log4j


def _builder(
    app_name: str, master: str, shuffle_partitions: int, jars: list[Path], log4j: Path
) -> SparkSession.Builder:
    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j.as_uri()}")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "false")  # unsupported in streaming; Spark warns on every start
        .config("spark.sql.session.timeZone", "UTC")
        .config(*_DISABLE_V2_KAFKA)
        # The Kafka sink pools its producers per JVM; close them soon after a stage stops
        # instead of keeping broker connections (and reconnect warnings) for 10 minutes.
        .config("spark.kafka.producer.cache.timeout", "30s")
        .config("spark.kafka.producer.cache.evictorThreadRunInterval", "10s")
        # Window state of many keys lives off-heap in RocksDB instead of in the driver's 1 GB
        # heap. The provider is recorded in the checkpoint: a checkpoint is only usable with it.
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
    )


def _check_jars(spark: SparkSession, jars: list[Path]) -> None:
    """StageError if the session was started (by someone else) without the connector jars."""
    loaded = spark.sparkContext.getConf().get("spark.jars", "")
    missing = [j.name for j in jars if j.name not in loaded]
    if missing:
        raise StageError(
            f"the running Spark session was started without the connector jars ({', '.join(missing)}); "
            "create it with spark_jobs.session.spark_session()"
        )
