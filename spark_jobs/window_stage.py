"""The Spark engine for a node: one keyed sliding/tumbling window aggregate as a Structured Streaming query.

A node with ``engine: spark`` runs exactly one window operator. Heavy keyed state (many keys,
long windows) lives in Spark's checkpointed state store instead of a Python service's memory;
the stage reads and writes the same Kafka topics, Avro payloads and ``ht.*`` headers as the
Python services, so either engine can feed the other.

Per replica ``r`` the stage reads every partition of ``spec.topic(input, r % replicas_of_stream(input))``
and writes ``spec.topic(output, r)``:

* input: only tuples with ``ht.type`` STABLE are used (TENTATIVE, UNDO, BOUNDARY, ... are
  skipped; the stage takes part in no DPC protocol), and payloads that are not valid Avro of
  the input schema are dropped;
* output: one STABLE tuple per (key, window) with the window's ``key``/``window_start``/
  ``window_end``/aggregate fields, message key ``str(key)`` bytes, in partition
  ``crc32(key) % P`` (what ``services.core.partitioner.partition_for`` computes), with
  ``ht.id`` dense per output partition (continuing after the last id already in the topic),
  ``ht.stime`` = ``window_end``, ``ht.replica`` = r, ``ht.epoch`` = 0. Within a partition,
  tuples are in (window_end, key) order, the order of the Python window operator.

Which windows are emitted
-------------------------
Spark's watermark is one value for the whole query, not per partition as in the Python
operator: ``W = (max event time of every STABLE, decodable input tuple read so far, over all
partitions) - lateness_ms`` (``lateness_ms`` defaults to the window's ``slide``). Windows are
``[s, s + size)`` with ``s`` a multiple of ``slide``. Once the stage has caught up with its
input (Spark runs a follow-up batch without data when the watermark moves), it has emitted
exactly the (key, window) pairs that hold at least one counted tuple and whose
``window_end <= W``, each window once. A tuple read after one of its windows was emitted
(``window_end <=`` the watermark of the previous micro-batch) is late: it is left out of that
window only. No tuple is late as long as the partitions' event times never drift apart by
more than ``lateness_ms`` at a batch boundary (true for time-ordered sources such as
``readings()``); then every emitted window equals the reference evaluation's, and the output
is the reference restricted to ``window_end <= max_event_time - lateness_ms`` (given that
bound is <= every partition's own max event time, up to which the reference closes windows).

Restarts
--------
The Spark checkpoint (``checkpoint_dir``) holds the input offsets, the watermark and the
window state. A micro-batch that was written to Kafka but not yet committed to the checkpoint
is recomputed identically on restart; tuples at or before the last (window_end, key) already
in an output partition are skipped, so a restart never duplicates output.

Run ``python -m spark_jobs.window_stage SPEC NODE --replica R --checkpoint DIR [--bootstrap B]``;
SIGTERM or Ctrl-C stops the query and then the session.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Sequence

from confluent_kafka import KafkaException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro
from pyspark.sql.window import Window

from services.core.codec import load_schema, schema_fields, schema_json
from services.core.config import Settings
from services.core.errors import ConfigError, HeaderError
from services.core.paths import hastream_home
from services.core.tuples import H_EPOCH, H_ID, H_REPLICA, H_STIME, H_TYPE, TupleType, parse_headers
from services.log.tail import last_message
from services.spec import OperatorDef, Spec, SpecError, load_spec
from spark_jobs.jars import SparkJarsError, ensure_spark_jars

log = logging.getLogger(__name__)

DEFAULT_TRIGGER_MS = 1000

# Read Kafka through the DSv1 source: Spark 4.1.1's DSv2 Kafka stream fails with a
# NullPointerException in its progress metrics (SPARK-55271) whenever a restarted query
# re-runs a batch that was planned but not committed, i.e. on every recovery after a crash.
_DISABLE_V2_KAFKA = (
    "spark.sql.streaming.disabledV2MicroBatchReaders",
    "org.apache.spark.sql.kafka010.KafkaSourceProvider",
)

# Avro primitive type -> the Spark SQL type to_avro needs for it.
_SPARK_TYPES = {
    "string": "string",
    "long": "bigint",
    "int": "int",
    "double": "double",
    "float": "float",
    "boolean": "boolean",
    "bytes": "binary",
}

_LOG4J2 = """\
# Written by spark_jobs.window_stage: a stage logs warnings and errors only.
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


class StageError(RuntimeError):
    """A stage that cannot start or that failed; the message is one line."""


@dataclass(frozen=True)
class StagePlan:
    """What one replica of a spark node reads, computes and writes."""

    spec_name: str
    node: str
    replica: int
    op: OperatorDef
    input_topic: str
    output_topic: str
    in_schema: str
    out_schema: str
    partitions: int  # of the output topic


@dataclass
class StageStats:
    """What a run did: tuples written per output partition and per micro-batch that wrote any,
    micro-batches run, and recomputed tuples skipped because an earlier run had written them."""

    written: dict[int, int] = field(default_factory=dict)
    batch_writes: dict[int, int] = field(default_factory=dict)
    batches: int = 0
    skipped: int = 0


def plan_stage(spec: Spec, node: str, replica: int = 0) -> StagePlan:
    """Resolve topics and schemas of a spark node replica; StageError if it is not one."""
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
    src = op.inputs[0]
    return StagePlan(
        spec_name=spec.name,
        node=node,
        replica=replica,
        op=op,
        input_topic=spec.topic(src, replica % spec.replicas_of_stream(src)),
        output_topic=spec.topic(op.output, replica),
        in_schema=spec.streams[src].schema,
        out_schema=spec.streams[op.output].schema,
        partitions=spec.streams[op.output].partitions,
    )


def default_checkpoint(plan: StagePlan) -> Path:
    return hastream_home() / "spark" / "checkpoints" / plan.spec_name / f"{plan.node}.r{plan.replica}"


# -- session -----------------------------------------------------------------------------


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
    conf_dir = hastream_home() / "spark"
    conf_dir.mkdir(parents=True, exist_ok=True)
    log4j = conf_dir / "log4j2.properties"
    if not log4j.is_file() or log4j.read_text() != _LOG4J2:
        tmp = conf_dir / f".log4j2.properties.{os.getpid()}"
        tmp.write_text(_LOG4J2)
        tmp.replace(log4j)  # atomic: concurrent stages never read a half-written file
    jar_list = ",".join(str(j) for j in jars)
    # Read by the JVM launcher: without it Spark warns that the hostname resolves to loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", jar_list)
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
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # no java, JVM failed to start, ...
        raise StageError(f"could not start Spark: {_one_line(e)}") from None
    spark.sparkContext.setLogLevel("WARN")
    loaded = spark.sparkContext.getConf().get("spark.jars", "")
    missing = [j.name for j in jars if j.name not in loaded]
    if missing:
        raise StageError(
            f"the running Spark session was started without the connector jars ({', '.join(missing)}); "
            "create it with spark_jobs.window_stage.spark_session()"
        )
    return spark


# -- the query ---------------------------------------------------------------------------


def _avro_type(t: Any) -> str:
    """Spark type of an Avro field type (for unions, the non-null branch)."""
    if isinstance(t, list):
        t = next(x for x in t if x != "null")
    if isinstance(t, dict):
        t = t.get("type")
    if t not in _SPARK_TYPES:
        raise StageError(f"Avro field type {t!r} is not supported by the Spark stage")
    return _SPARK_TYPES[t]


def _aggregate(func: str, fld: str | None) -> Column:
    if func == "count":
        return F.count(F.lit(1))
    col = F.col(fld)  # type: ignore[arg-type]
    return {"sum": F.sum, "avg": F.avg, "min": F.min, "max": F.max}[func](col)


def build_windows(
    spark: SparkSession, plan: StagePlan, bootstrap: str, lateness_ms: int, max_offsets_per_trigger: int | None = None
) -> DataFrame:
    """The streaming frame of closed windows: __k (original key), window_start/end (ms), aggregates."""
    op = plan.op
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", plan.input_topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    raw = reader.load()
    stable = raw.where(
        F.exists("headers", lambda h: (h["key"] == H_TYPE) & (h["value"].cast("string") == TupleType.STABLE.value))
    )
    decoded = stable.select(from_avro("value", schema_json(plan.in_schema), {"mode": "PERMISSIVE"}).alias("r"))
    recs = (
        decoded.where(F.col("r").isNotNull())
        .select("r.*")
        .where(F.col(op.key).isNotNull() & F.col(op.time).isNotNull())
    )
    timed = recs.withColumn("__et", F.timestamp_millis(F.col(op.time))).withWatermark(
        "__et", f"{lateness_ms} milliseconds"
    )
    grouped = timed.groupBy(
        F.window("__et", f"{op.size} milliseconds", f"{op.slide} milliseconds").alias("__w"),
        F.col(op.key).alias("__k"),
    )
    aggs = [_aggregate(a.func, a.field).alias(a.out) for a in op.aggregates]
    return grouped.agg(*aggs).select(
        "__k",
        F.unix_millis(F.col("__w.start")).alias("window_start"),
        F.unix_millis(F.col("__w.end")).alias("window_end"),
        *[a.out for a in op.aggregates],
    )


@dataclass(frozen=True)
class _Resume:
    """The last tuple already in one output partition."""

    next_id: int
    window_end: int
    key: str


def _resume_points(bootstrap: str, topic: str, partitions: int) -> dict[int, _Resume]:
    """Per output partition, the id/window/key of its last tuple (absent for empty partitions)."""
    out: dict[int, _Resume] = {}
    for p in range(partitions):
        try:
            msg = last_message(bootstrap, topic, p)
        except KafkaException as e:
            raise StageError(f"cannot read the last tuple of output topic '{topic}' partition {p}: {e}") from None
        if msg is None:
            continue
        try:
            meta = parse_headers(msg.headers())
        except HeaderError as e:
            raise StageError(f"last message of '{topic}' partition {p} is not a hastream tuple: {e}") from None
        out[p] = _Resume(meta.id + 1, meta.stime, (msg.key() or b"").decode())
    return out


class _BatchWriter:
    """foreachBatch sink: orders each batch, numbers it densely per partition, writes it to Kafka.

    The per-partition id base lives on the driver: it starts after the last id in the topic
    and grows by what each batch wrote.
    """

    def __init__(self, plan: StagePlan, bootstrap: str, key_type: str, resume: dict[int, _Resume]) -> None:
        self.plan, self.bootstrap, self.key_type = plan, bootstrap, key_type
        self.next_id = {p: (resume[p].next_id if p in resume else 0) for p in range(plan.partitions)}
        self.resume = resume
        self.stats = StageStats(written={p: 0 for p in range(plan.partitions)})
        schema = load_schema(plan.out_schema)
        self.out_fields = [(f["name"], _avro_type(f["type"]), f.get("default")) for f in schema["fields"]]
        self.value_schema = schema_json(plan.out_schema)

    def _value(self) -> Column:
        produced = {"key", "window_start", "window_end"} | {a.out for a in self.plan.op.aggregates}
        cols = []
        for name, stype, default in self.out_fields:
            src = F.col(name) if name in produced else F.lit(default)
            cols.append(src.cast(stype).alias(name))
        return to_avro(F.struct(*cols), self.value_schema)

    def _headers(self) -> Column:
        def h(name: str, value: Column) -> Column:
            return F.struct(F.lit(name).alias("key"), value.cast("string").cast("binary").alias("value"))

        return F.array(
            h(H_TYPE, F.lit(TupleType.STABLE.value)),
            h(H_ID, F.col("__id")),
            h(H_STIME, F.col("window_end")),
            h(H_REPLICA, F.lit(self.plan.replica)),
            h(H_EPOCH, F.lit(0)),
        )

    def _not_written_yet(self) -> Column | None:
        """Rows after the last tuple already in their partition (a replayed batch writes only the rest)."""
        conds = []
        for p, r in self.resume.items():
            last_key = F.lit(r.key).cast(self.key_type)
            conds.append(
                (F.col("__p") != p)
                | (F.col("window_end") > r.window_end)
                | ((F.col("window_end") == r.window_end) & (F.col("__k") > last_key))
            )
        if not conds:
            return None
        cond = conds[0]
        for c in conds[1:]:
            cond = cond & c
        return cond

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.stats.batches += 1
        parts = self.plan.partitions
        df = batch.withColumn("key", F.col("__k").cast("string"))
        df = df.withColumn("__p", (F.crc32(F.col("key").cast("binary")) % F.lit(parts)).cast("int"))
        cond = self._not_written_yet()
        df = df.withColumn("__new", cond if cond is not None else F.lit(True))
        base = F.element_at(
            F.create_map(*[x for p in range(parts) for x in (F.lit(p), F.lit(self.next_id[p]))]), F.col("__p")
        )
        order = Window.partitionBy("__p", "__new").orderBy("window_end", "__k")
        df = df.withColumn("__id", (F.row_number().over(order) - 1 + base).cast("bigint")).persist()
        try:
            rows = df.groupBy("__p", "__new").agg(F.count(F.lit(1)).alias("n")).collect()
            counts = {r["__p"]: r["n"] for r in rows if r["__new"]}
            self.stats.skipped += sum(r["n"] for r in rows if not r["__new"])
            if not counts:
                return
            out = df.where("__new").select(
                F.col("key").cast("binary").alias("key"),
                self._value().alias("value"),
                self._headers().alias("headers"),
                F.col("__p").alias("partition"),
            )
            (
                out.write.format("kafka")
                .option("kafka.bootstrap.servers", self.bootstrap)
                .option("kafka.acks", "all")
                .option("kafka.enable.idempotence", "true")
                .option("topic", self.plan.output_topic)
                .save()
            )
        finally:
            df.unpersist()
        for p, n in counts.items():
            self.next_id[p] += n
            self.stats.written[p] += n
        self.stats.batch_writes[batch_id] = sum(counts.values())
        log.info("batch %d: wrote %s", batch_id, counts)


def run_stage(
    spec: Spec,
    node: str,
    bootstrap: str,
    replica: int = 0,
    checkpoint_dir: str | Path | None = None,
    trigger_ms: int = DEFAULT_TRIGGER_MS,
    lateness_ms: int | None = None,
    stop_event: threading.Event | None = None,
    timeout: float | None = None,
    max_offsets_per_trigger: int | None = None,
    spark: SparkSession | None = None,
) -> StageStats:
    """Run one replica of a spark node until ``stop_event`` is set, ``timeout`` passes or the query fails.

    With neither ``stop_event`` nor ``timeout`` it runs until the query fails (the CLI's
    await mode). A session passed in is reused and left running, so tests and callers that
    run several stages pay for one JVM; otherwise the stage creates and stops its own.
    Raises StageError (one line) if the query fails.
    """
    plan = plan_stage(spec, node, replica)
    lateness = plan.op.slide if lateness_ms is None else lateness_ms
    if lateness < 0:
        raise StageError(f"lateness_ms must be >= 0, got {lateness}")
    if trigger_ms < 0:
        raise StageError(f"trigger_ms must be >= 0, got {trigger_ms}")
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint(plan)
    ckpt.mkdir(parents=True, exist_ok=True)
    own = spark is None
    session = spark_session(f"hastream-{plan.spec_name}-{node}-r{replica}") if spark is None else spark
    session.conf.set(_DISABLE_V2_KAFKA[0], _DISABLE_V2_KAFKA[1])
    try:
        key_type = _avro_type(schema_fields(plan.in_schema)[plan.op.key])
        writer = _BatchWriter(plan, bootstrap, key_type, _resume_points(bootstrap, plan.output_topic, plan.partitions))
        windows = build_windows(session, plan, bootstrap, lateness, max_offsets_per_trigger)
        query = (
            windows.writeStream.outputMode("append")
            .queryName(f"{plan.spec_name}.{node}.r{replica}")
            .option("checkpointLocation", str(ckpt))
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .foreachBatch(writer)
            .start()
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        failure: str | None = None
        try:
            while query.isActive:
                if stop_event is not None and stop_event.is_set():
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                try:
                    query.awaitTermination(0.5)
                except Exception as e:  # StreamingQueryException: the query died
                    failure = _one_line(e)
                    break
            if failure is None and query.exception() is not None:
                failure = _one_line(query.exception())
        finally:
            _stop_between_batches(query)
        if failure is not None and not (stop_event is not None and stop_event.is_set()):
            raise StageError(f"Spark stage {plan.node}.r{plan.replica} failed: {failure}")
        return writer.stats
    finally:
        if own:
            session.stop()


def _stop_between_batches(query: Any, timeout: float = 15.0) -> None:
    """Stop the query while it waits for its next trigger if possible.

    Stopping interrupts a running micro-batch; inside foreachBatch that surfaces as an
    InterruptedException whose long message makes Spark 4.1's interruption check overflow
    its stack (logged, harmless, but alarming). An interrupted batch is simply re-run on
    restart, so after ``timeout`` the query is stopped regardless.
    """
    deadline = time.monotonic() + timeout
    try:
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.05)
    except Exception as e:  # status of a query that died meanwhile
        log.debug("query status: %s", e)
    try:
        query.stop()
    except Exception as e:  # stopping a query that already failed may raise again
        log.debug("stopping the query: %s", e)


def _one_line(e: BaseException) -> str:
    text = str(getattr(e, "desc", None) or e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


# -- CLI ---------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line instead of usage plus message."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _parser() -> _Parser:
    p = _Parser(
        prog="python -m spark_jobs.window_stage",
        description="Run one replica of a spark node (one window operator) as a Spark Structured Streaming query.",
    )
    p.add_argument("spec", help="query spec YAML")
    p.add_argument("node", help="name of a node with engine: spark")
    p.add_argument("--replica", type=int, default=0, help="replica index (default 0)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: $HASTREAM_BOOTSTRAP)")
    p.add_argument("--checkpoint", help="Spark checkpoint folder (default: under $HASTREAM_HOME/spark/checkpoints)")
    p.add_argument("--trigger-ms", type=int, default=DEFAULT_TRIGGER_MS, help="micro-batch interval")
    p.add_argument("--lateness-ms", type=int, default=None, help="watermark delay (default: the window slide)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None, help="cap on input tuples per micro-batch")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.trigger_ms < 0:
        parser.error(f"--trigger-ms must be >= 0, got {args.trigger_ms}")
    if args.lateness_ms is not None and args.lateness_ms < 0:
        parser.error(f"--lateness-ms must be >= 0, got {args.lateness_ms}")
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        parser.error(f"--max-offsets-per-trigger must be >= 1, got {args.max_offsets_per_trigger}")
    try:
        spec = load_spec(args.spec)
        plan_stage(spec, args.node, args.replica)
        bootstrap = Settings.from_env(args.bootstrap).bootstrap
    except SpecError as e:
        parser.exit(2, f"{parser.prog}: " + "; ".join(e.problems) + "\n")
    except (StageError, ConfigError) as e:
        parser.exit(2, f"{parser.prog}: {e}\n")
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        run_stage(
            spec,
            args.node,
            bootstrap,
            replica=args.replica,
            checkpoint_dir=args.checkpoint,
            trigger_ms=args.trigger_ms,
            lateness_ms=args.lateness_ms,
            stop_event=stop,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
        )
    except StageError as e:
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
