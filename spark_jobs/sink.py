"""Writing a stage's results to Kafka: one STABLE tuple per closed window, ids dense, nothing twice.

Per closed (key, window): one STABLE tuple with the window's ``key``/``window_start``/
``window_end``/aggregate fields, message key ``str(key)`` bytes, in partition
``crc32(key) % P`` (what ``services.core.partitioner.partition_for`` computes), with
``ht.id`` dense per output partition (continuing after the last id already in the topic),
``ht.stime`` = ``window_end``, ``ht.replica`` = r, ``ht.epoch`` = 0. Within a partition,
tuples are in (window_end, key) order, the order of the Python window operator. The headers
are the ones ``services.core.tuples.header_writer`` builds, with id and stime per row.

Restarts
--------
The Spark checkpoint holds the input offsets, the watermark and the window state. A
micro-batch that was written to Kafka but not yet committed to the checkpoint is recomputed
identically on restart; tuples at or before the last (window_end, key) already in an output
partition are skipped, so a restart never duplicates output.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from confluent_kafka import KafkaException, Message
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import to_avro
from pyspark.sql.window import Window

from services.core.codec import record_fields, schema_header, schema_json
from services.core.errors import HeaderError
from services.core.tuples import H_ID, H_STIME, HeaderWriter, TupleType, header_writer, parse_headers
from services.log.tail import last_message
from spark_jobs.plan import StageError, StagePlan
from spark_jobs.session import kafka_options

log = logging.getLogger(__name__)

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


@dataclass
class StageStats:
    """What a run did: tuples written per output partition and per micro-batch that wrote any,
    micro-batches run, and recomputed tuples skipped because an earlier run had written them."""

    written: dict[int, int] = field(default_factory=dict)
    batch_writes: dict[int, int] = field(default_factory=dict)
    batches: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class Resume:
    """The last tuple already in one output partition."""

    next_id: int
    window_end: int
    key: str


def spark_type(t: Any) -> str:
    """Spark type of an Avro field type (for unions, the non-null branch)."""
    if isinstance(t, list):
        t = next(x for x in t if x != "null")
    if isinstance(t, dict):
        t = t.get("type")
    if t not in _SPARK_TYPES:
        raise StageError(f"Avro field type {t!r} is not supported by the Spark stage")
    return _SPARK_TYPES[t]


def header_column(writer: HeaderWriter, ttype: TupleType, tid: Column, stime: Column) -> Column:
    """The Kafka sink's ``headers`` column: ``writer``'s headers of one tuple, with id and stime per row.

    The codec decides names, order, type bytes, replica and epoch; the two per-row integers
    get its ASCII-decimal form from a cast.
    """
    per_row = {H_ID: tid, H_STIME: stime}

    def value(name: str, constant: str | bytes | None) -> Column:
        return per_row[name].cast("string").cast("binary") if name in per_row else F.lit(constant)

    return F.array(*[F.struct(F.lit(k).alias("key"), value(k, v).alias("value")) for k, v in writer(ttype, 0, 0)])


def resume_points(bootstrap: str, topic: str, partitions: int) -> dict[int, Resume]:
    """Per output partition, the id/window/key of its last tuple (absent for empty partitions)."""
    out: dict[int, Resume] = {}
    for p in range(partitions):
        try:
            msg = last_message(bootstrap, topic, p)
        except KafkaException as e:
            raise StageError(f"cannot read the last tuple of output topic '{topic}' partition {p}: {e}") from None
        if msg is not None:
            out[p] = _resume_after(msg, topic, p)
    return out


def _resume_after(msg: Message, topic: str, p: int) -> Resume:
    try:
        meta = parse_headers(msg.headers())
    except HeaderError as e:
        raise StageError(f"last message of '{topic}' partition {p} is not a hastream tuple: {e}") from None
    return Resume(meta.id + 1, meta.stime, (msg.key() or b"").decode())


class BatchWriter:
    """foreachBatch sink: orders each batch, numbers it densely per partition, writes it to Kafka.

    The per-partition id base lives on the driver: it starts after the last id in the topic
    and grows by what each batch wrote.
    """

    def __init__(self, plan: StagePlan, bootstrap: str, key_type: str, resume: dict[int, Resume]) -> None:
        self.plan, self.bootstrap, self.key_type = plan, bootstrap, key_type
        self.next_id = {p: (resume[p].next_id if p in resume else 0) for p in range(plan.partitions)}
        self.resume = resume
        self.stats = StageStats(written={p: 0 for p in range(plan.partitions)})
        self.headers = header_writer(plan.replica, schema=schema_header(plan.out_schema))
        self.out_fields = [(f["name"], spark_type(f["type"]), f.get("default")) for f in record_fields(plan.out_schema)]
        self.value_schema = schema_json(plan.out_schema)

    @classmethod
    def for_plan(cls, plan: StagePlan, bootstrap: str) -> BatchWriter:
        """A writer that continues after what the output topic already holds."""
        key_type = spark_type(plan.window.key_type)
        return cls(plan, bootstrap, key_type, resume_points(bootstrap, plan.output_topic, plan.partitions))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.stats.batches += 1
        df = self._numbered(batch).persist()
        try:
            counts = self._count(df)
            if not counts:
                return
            self._write(df.where("__new"))
        finally:
            df.unpersist()
        for p, n in counts.items():
            self.next_id[p] += n
            self.stats.written[p] += n
        self.stats.batch_writes[batch_id] = sum(counts.values())
        log.info("batch %d: wrote %s", batch_id, counts)

    def _numbered(self, batch: DataFrame) -> DataFrame:
        """The batch with its message key, partition (__p), whether it is new (__new) and its id (__id)."""
        parts = self.plan.partitions
        df = batch.withColumn("key", F.col("__k").cast("string"))
        df = df.withColumn("__p", (F.crc32(F.col("key").cast("binary")) % F.lit(parts)).cast("int"))
        cond = self._not_written_yet()
        df = df.withColumn("__new", cond if cond is not None else F.lit(True))
        base = F.element_at(
            F.create_map(*[x for p in range(parts) for x in (F.lit(p), F.lit(self.next_id[p]))]), F.col("__p")
        )
        order = Window.partitionBy("__p", "__new").orderBy("window_end", "__k")
        return df.withColumn("__id", (F.row_number().over(order) - 1 + base).cast("bigint"))

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
        return reduce(operator.and_, conds) if conds else None

    def _count(self, df: DataFrame) -> dict[int, int]:
        """New rows per partition; the replayed ones only go to the stats."""
        rows = df.groupBy("__p", "__new").agg(F.count(F.lit(1)).alias("n")).collect()
        self.stats.skipped += sum(r["n"] for r in rows if not r["__new"])
        return {r["__p"]: r["n"] for r in rows if r["__new"]}

    def _write(self, new: DataFrame) -> None:
        out = new.select(
            F.col("key").cast("binary").alias("key"),
            self._value().alias("value"),
            header_column(self.headers, TupleType.STABLE, F.col("__id"), F.col("window_end")).alias("headers"),
            F.col("__p").alias("partition"),
        )
        (
            out.write.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("kafka.acks", "all")
            .option("kafka.enable.idempotence", "true")
            .option("topic", self.plan.output_topic)
            .options(**kafka_options(reader=False))
            .save()
        )

    def _value(self) -> Column:
        """The Avro payload: produced fields from the window, the output schema's others at their defaults."""
        produced = self.plan.window.produced
        cols = []
        for name, stype, default in self.out_fields:
            src = F.col(name) if name in produced else F.lit(default)
            cols.append(src.cast(stype).alias(name))
        return to_avro(F.struct(*cols), self.value_schema)
