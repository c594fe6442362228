"""The local Spark session of a Spark node replica: quiet logs, loopback only, no UI.

One session can serve several windows (tests pay for one JVM). The node's Kafka I/O is the
Python node's; Spark only reads the window's Parquet segments, so it needs no connector jars.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pyspark.sql import SparkSession

from services.core.errors import HastreamError
from services.core.paths import hastream_home


class StageError(HastreamError, RuntimeError):
    """Spark could not start or a Spark job failed; the message is one line."""


_LOG4J2 = """\
# Written by spark_jobs.session: a Spark node logs warnings and errors only.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""


# A node's Spark jobs are small and latency-bound, and its JVM shares the host with the broker and
# other replicas. The client compiler alone (no C2 compile threads) and a serial collector make
# them about twice as fast on a busy 2-core host, and cost less CPU and memory on large windows
# too (bench.spark_window: 311 vs 411 CPU us per tuple, JVM 755 vs 1,357 MB, p99 2.6 vs 8.4 s).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"


def spark_session(app_name: str = "hastream", shuffle_partitions: int = 2, master: str = "local[2]") -> SparkSession:
    """A local session (no UI, quiet logs); StageError with one line if Spark cannot start."""
    log4j = _log4j_conf()
    # Read by the JVM launcher: without it Spark warns that the hostname resolves to loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j.as_uri()} {JVM_OPTIONS}")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        # A window's jobs are many and mostly small: adaptive re-planning costs more CPU than it saves.
        .config("spark.sql.adaptive.enabled", "false")
    )
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # no java, JVM failed to start, ...
        raise StageError(f"could not start Spark: {one_line(e)}") from None
    spark.sparkContext.setLogLevel("WARN")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # not a line per closed connection
    return spark


def one_line(e: BaseException) -> str:
    """The first line of an error, Spark's (whose ``desc`` holds the JVM message) or Python's."""
    text = str(getattr(e, "desc", None) or e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def _log4j_conf() -> Path:
    """The session's log4j2 configuration file, rewritten only when its text changed."""
    conf_dir = hastream_home() / "spark"
    conf_dir.mkdir(parents=True, exist_ok=True)
    log4j = conf_dir / "log4j2.properties"
    if not log4j.is_file() or log4j.read_text() != _LOG4J2:
        tmp = conf_dir / f".log4j2.properties.{os.getpid()}"
        tmp.write_text(_LOG4J2)
        tmp.replace(log4j)  # atomic: concurrent sessions never read a half-written file
    return log4j
