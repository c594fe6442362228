"""The Structured Streaming query: read the input topic with its headers, decode Avro, window and aggregate.

Only tuples whose ``ht.type`` is STABLE are used (TENTATIVE, UNDO, BOUNDARY, ... are
skipped; the stage takes part in no DPC protocol), and payloads that are not valid Avro of
the input schema are dropped.

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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.streaming import StreamingQuery

from services.core.codec import schema_json
from services.core.tuples import H_TYPE, TYPE_BYTES, TupleType
from services.spec import Aggregate
from spark_jobs.plan import StageError, StagePlan, WindowPlan
from spark_jobs.session import kafka_options, one_line

log = logging.getLogger(__name__)

DEFAULT_TRIGGER_MS = 1000

_FIELD_AGGREGATES: dict[str, Callable[[Column], Column]] = {"sum": F.sum, "avg": F.avg, "min": F.min, "max": F.max}


def build_windows(
    spark: SparkSession, plan: StagePlan, bootstrap: str, lateness_ms: int, max_offsets_per_trigger: int | None = None
) -> DataFrame:
    """The streaming frame of closed windows: __k (original key), window_start/end (ms), aggregates."""
    raw = _read_kafka(spark, plan, bootstrap, max_offsets_per_trigger)
    return _windows(_decode_stable(raw, plan), plan.window, lateness_ms)


def start_query(
    windows: DataFrame, sink: Callable[[DataFrame, int], None], name: str, checkpoint: Path, trigger_ms: int
) -> StreamingQuery:
    """Start the query: closed windows (append mode) to ``sink`` every ``trigger_ms``, checkpointed."""
    return (
        windows.writeStream.outputMode("append")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .foreachBatch(sink)
        .start()
    )


def await_query(query: StreamingQuery, stop_event: threading.Event | None, timeout: float | None) -> str | None:
    """Wait until ``stop_event`` is set, ``timeout`` passes or the query ends, then stop it; why it failed, if it did."""
    deadline = None if timeout is None else time.monotonic() + timeout
    failure: str | None = None
    try:
        while query.isActive:
            if stop_event is not None and stop_event.is_set():
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            try:
                # pyspark's stub says int, but it takes any number of seconds (int(timeout * 1000) ms).
                query.awaitTermination(0.5)  # type: ignore[arg-type]
            except Exception as e:  # StreamingQueryException: the query died
                failure = one_line(e)
                break
        if failure is None:
            died = query.exception()
            failure = None if died is None else one_line(died)
    finally:
        stop_between_batches(query)
    return failure


def stop_between_batches(query: StreamingQuery, timeout: float = 15.0) -> None:
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


def _read_kafka(spark: SparkSession, plan: StagePlan, bootstrap: str, max_offsets_per_trigger: int | None) -> DataFrame:
    """Every partition of the input topic from the start, with headers (the tuple type is one)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", plan.input_topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .options(**kafka_options(reader=True))
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def _decode_stable(raw: DataFrame, plan: StagePlan) -> DataFrame:
    """The input records of STABLE tuples with a valid payload and both key and event time set."""
    stable_bytes = F.lit(TYPE_BYTES[TupleType.STABLE])
    stable = raw.where(F.exists("headers", lambda h: (h["key"] == H_TYPE) & (h["value"] == stable_bytes)))
    decoded = stable.select(from_avro("value", schema_json(plan.in_schema), {"mode": "PERMISSIVE"}).alias("r"))
    w = plan.window
    return (
        decoded.where(F.col("r").isNotNull()).select("r.*").where(F.col(w.key).isNotNull() & F.col(w.time).isNotNull())
    )


def _windows(recs: DataFrame, w: WindowPlan, lateness_ms: int) -> DataFrame:
    """Sliding windows per key over event time, closed by the watermark ``max event time - lateness_ms``."""
    timed = recs.withColumn("__et", F.timestamp_millis(F.col(w.time))).withWatermark(
        "__et", f"{lateness_ms} milliseconds"
    )
    grouped = timed.groupBy(
        F.window("__et", f"{w.size} milliseconds", f"{w.slide} milliseconds").alias("__w"),
        F.col(w.key).alias("__k"),
    )
    return grouped.agg(*[_aggregate(a).alias(a.out) for a in w.aggregates]).select(
        "__k",
        F.unix_millis(F.col("__w.start")).alias("window_start"),
        F.unix_millis(F.col("__w.end")).alias("window_end"),
        *[a.out for a in w.aggregates],
    )


def _aggregate(agg: Aggregate) -> Column:
    if agg.func == "count":
        return F.count(F.lit(1))
    if agg.field is None:  # a parsed spec always names it
        raise StageError(f"aggregate '{agg.out}': {agg.func} needs a field")
    return _FIELD_AGGREGATES[agg.func](F.col(agg.field))
