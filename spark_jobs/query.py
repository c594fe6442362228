"""The Spark SQL job of a Spark window: the windows that closed between two flushes, from the segments.

Every input tuple is one row ``(n, k, t, f, v0, v1, ...)``: its arrival number, key, event
time, the window watermark just before it arrived, and the aggregated fields. The windows
are those of ``services.operators.window`` exactly: ``[s, s + size)`` with ends on multiples
of ``slide``; a tuple feeds every window containing ``t`` whose end is past ``f`` (those at or
before ``f`` had closed when it came: it is late for them). A flush emits the windows whose
end is in ``(after, upto]``, in (end, key) order, the Python operator's output order.

Sums add the values in arrival order (sorted by ``n``), as the Python operator does, so the
floating-point results are the same bits on every replica, in every flush pattern, and in
the Python engine.
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from services.operators.window import Accumulator

T = TypeVar("T")


@dataclass(frozen=True)
class WindowShape:
    """What the job needs of the window operator."""

    size: int
    slide: int
    nfields: int  # aggregated fields, v0..v{nfields-1}
    sums: bool  # some aggregate needs a field's sum (sum, avg)
    extremes: bool  # some aggregate needs a field's min or max
    ddl: str  # the segments' schema as Spark DDL


def closed_windows(
    spark: SparkSession, paths: list[str], shape: WindowShape, after: int, upto: int
) -> list[tuple[int, Any, Accumulator]]:
    """(end, key, accumulator) of every window with an end in ``(after, upto]`` that has a tuple, in (end, key) order."""
    if not paths:
        return []
    df = spark.read.schema(shape.ddl).parquet(*paths)
    rows = _aggregate(_assign(df, shape, after, upto), shape).collect()
    # Sorted here, not by Spark: a global sort is one more stage and a sampling job, for a few rows.
    rows.sort(key=_order)
    return [(r["e"], r["k"], _accumulator(r, shape)) for r in rows]


def _order(row: Any) -> tuple[int, bool, Any]:
    """Spark's (end, key) order: nulls first, strings by code point (UTF-8 byte order)."""
    k = row["k"]
    return (row["e"], k is not None, k)


def _assign(df: DataFrame, shape: WindowShape, after: int, upto: int) -> DataFrame:
    """One row per (tuple, window it feeds that closed in the range): the window's end as ``e``."""
    size, slide = shape.size, shape.slide
    last = F.col("t") - F.pmod(F.col("t"), F.lit(slide))  # start of the newest window holding t
    past = F.greatest(F.col("f"), F.lit(after)) + 1
    lo = F.greatest(last + slide, past + F.pmod(-past, F.lit(slide)))  # first end > past, on the grid
    hi = F.least(last + size, F.lit(upto - upto % slide))
    fed = df.where(lo <= hi)
    return fed.select(
        F.explode(F.sequence(lo, hi, F.lit(slide).cast("long"))).alias("e"),
        "k",
        "n",
        *[f"v{i}" for i in range(shape.nfields)],
    )


def _aggregate(df: DataFrame, shape: WindowShape) -> DataFrame:
    vs = [f"v{i}" for i in range(shape.nfields)]
    aggs: list[Column] = [F.count(F.lit(1)).alias("c")]
    if shape.sums and vs:
        aggs.append(F.array_sort(F.collect_list(F.struct("n", *vs))).alias("ordered"))
    if shape.extremes:
        aggs += [F.min(v).alias(f"min{v}") for v in vs] + [F.max(v).alias(f"max{v}") for v in vs]
    grouped = df.groupBy("e", "k").agg(*aggs)
    if shape.sums and vs:
        grouped = grouped.select(
            "*", *[F.aggregate("ordered", F.lit(0.0), _adder(v)).alias(f"sum{v}") for v in vs]
        ).drop("ordered")
    return grouped


def _adder(v: str) -> Callable[[Column, Column], Column]:
    return lambda acc, x: acc + x[v]


def _accumulator(row: Any, shape: WindowShape) -> Accumulator:
    acc = Accumulator(shape.nfields)
    acc.count = row["c"]
    for i in range(shape.nfields):
        if shape.sums:
            acc.sums[i] = row[f"sumv{i}"]
        if shape.extremes:
            acc.mins[i], acc.maxs[i] = row[f"minv{i}"], row[f"maxv{i}"]
    return acc


def in_thread(job: Callable[[], T], progress: Callable[[], None], every_s: float = 0.05) -> T:
    """Run ``job`` (a Spark action, which holds the calling thread) on the process's one Spark job thread,
    calling ``progress`` while it runs: the node's heartbeats go on during a long job, as they do during
    long Python work. One thread for every job keeps one Py4J connection instead of one per job."""
    future = _jobs().submit(job)
    while True:
        try:
            return future.result(timeout=every_s)
        except concurrent.futures.TimeoutError:
            progress()


@functools.cache
def _jobs() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-job")
