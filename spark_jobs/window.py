"""The window aggregate of a node with ``engine: spark``: state in Parquet segments, windows computed by Spark.

A Spark node is a DPC node replica like any other (``services.node``): the same ports,
SUnion, SOutput, heartbeats, restart images and reconciliation. Only its one window operator
differs. Its results are the Python operator's (``services.operators.window``) tuple for
tuple, but its state is not in the process's memory:

- ``push`` validates each tuple as the Python operator does, notes the window watermark it
  arrived under (which decides which windows it is late for) and buffers it;
- windows are decided closed as the watermark moves (by a tuple or by ``advance``), and
  their results are computed by one Spark job per flush (every ``flush_ms``), which also
  writes the buffer as a new immutable segment (``spark_jobs.segments``);
- ``state()`` is the list of segments plus the small buffer, so checkpoint/redo is cheap and
  a rollback just reads the older list again.

Until a flush, the node's BOUNDARY stays below the windows decided but not emitted
(``held``), so a downstream node never sees a result behind a boundary.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import SparkSession

from services.core.errors import RestartImageError
from services.core.tuples import NO_TIME
from services.operators.base import Item, Operator, reason
from services.operators.window import window_input, window_result
from services.spec import Aggregate
from spark_jobs.query import WindowShape, closed_windows, in_thread
from spark_jobs.segments import Segment, SegmentStore

log = logging.getLogger(__name__)

DEFAULT_FLUSH_MS = 1000
MAX_BUFFER = 100_000  # tuples buffered before they are written as a segment regardless

_ARROW = {"string": pa.string(), "long": pa.int64(), "int": pa.int64(), "double": pa.float64(), "float": pa.float64()}
_DDL = {"string": "STRING", "long": "BIGINT", "int": "BIGINT", "double": "DOUBLE", "float": "DOUBLE"}


def _base_type(t: Any) -> str:
    """The Avro primitive of a field type (for a union, its non-null branch)."""
    if isinstance(t, list):
        t = next(x for x in t if x != "null")
    if isinstance(t, dict):
        t = t.get("type")
    if t not in _ARROW:
        raise ValueError(f"Avro type {t!r} is not supported in a Spark window (string, int, long, float, double)")
    return str(t)


@dataclass
class _Held:
    """What a window holds between flushes besides its segments."""

    columns: dict[str, list[Any]]  # the buffered tuples, by column
    min_t: int  # smallest tuple time in the buffer
    max_end: int  # latest window end a buffered tuple feeds


# segments, buffer, next arrival number, watermark, emitted up to, min/max window end fed, late count
_State = tuple[tuple[Segment, ...], _Held, int, "int | None", int, int, int, int]


class SparkWindow(Operator):
    stateful = True

    def __init__(
        self,
        name: str,
        key: str,
        time_field: str,
        size: int,
        slide: int,
        aggregates: Sequence[Aggregate],
        types: dict[str, Any],
        store_at: Callable[[pa.Schema], SegmentStore],
        spark: SparkSession,
        flush_ms: int = DEFAULT_FLUSH_MS,
    ) -> None:
        super().__init__(name)
        self.key, self.time, self.size, self.slide = key, time_field, size, slide
        self.aggs = tuple(aggregates)
        self.fields = sorted({a.field for a in self.aggs if a.field})
        vs = [(f"v{i}", _base_type(types[f])) for i, f in enumerate(self.fields)]
        cols = [("n", "long"), ("k", _base_type(types[key])), ("t", "long"), ("f", "long"), *vs]
        self.names = [c for c, _ in cols]
        self.store = store_at(pa.schema([(c, _ARROW[t]) for c, t in cols]))
        self.shape = WindowShape(
            size,
            slide,
            len(self.fields),
            sums=any(a.func in ("sum", "avg") for a in self.aggs),
            extremes=any(a.func in ("min", "max") for a in self.aggs),
            ddl=", ".join(f"{c} {_DDL[t]}" for c, t in cols),
        )
        self.spark = spark
        self.flush_s = flush_ms / 1000
        self.clear()

    def warm_up(self, rounds: int = 3) -> None:
        """Run the window's job on a few made-up tuples, so that the JVM has loaded and compiled
        what it needs before the node takes input: a cold first job takes seconds, many on a busy host."""
        folder = Path(tempfile.mkdtemp(prefix="hastream-warm-up-"))
        try:
            store = SegmentStore(folder, self.store.schema)
            rows = {c: [] for c in self.names}  # type: dict[str, list[Any]]
            key = "k" if self.store.schema.field("k").type == pa.string() else 1
            for i in range(8):
                for c, v in (("n", i), ("k", key), ("t", i * self.slide), ("f", NO_TIME)):
                    rows[c].append(v)
                for j in range(len(self.fields)):
                    rows[f"v{j}"].append(i)
            seg = store.write(rows, 0, 8 * self.slide + self.size)
            for _ in range(rounds):
                closed_windows(self.spark, store.paths((seg,)), self.shape, NO_TIME, 8 * self.slide)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # -- state --------------------------------------------------------------------------
    def clear(self) -> None:
        self.segments: tuple[Segment, ...] = ()
        self.buf = self._empty()
        self.n = 0  # arrival number of the next tuple
        self.watermark: int | None = None
        self.emitted = NO_TIME  # every window ending at or before it is emitted
        self.min_end = -NO_TIME  # earliest window end a tuple feeds
        self.max_end = NO_TIME  # latest window end a tuple feeds
        self.late = 0
        self.since: float | None = None  # when results began to be held (monotonic)

    def _empty(self) -> _Held:
        return _Held({c: [] for c in self.names}, -NO_TIME, NO_TIME)

    def state(self) -> object:
        self.store.pin(self.segments)
        return (self.segments, self.buf, self.n, self.watermark, self.emitted, self.min_end, self.max_end, self.late)

    def set_state(self, state: object) -> None:
        segments, buf, n, wm, emitted, min_end, max_end, late = cast(_State, state)
        missing = self.store.missing(segments)
        if missing:
            raise RestartImageError(
                f"Spark window '{self.name}': {len(missing)} segment(s) of the state to restore, {missing[0]} first, "
                f"are not in {self.store.folder}: give the replica the checkpoint folder it used before "
                "(shared storage when it moves to another host)"
            )
        self.segments, self.buf, self.n, self.watermark, self.emitted = segments, buf, n, wm, emitted
        self.min_end, self.max_end, self.late = min_end, max_end, late
        self.since = time.monotonic() if self.held() is not None else None

    def oldest_time(self, port: int) -> int | None:
        """Undo/redo is not used: a Spark node reconciles by checkpoint/redo (its snapshots are cheap)."""
        return None

    # -- input --------------------------------------------------------------------------
    def push(self, port: int, items: list[Item]) -> None:
        tf, kf, fields, size, slide = self.time, self.key, self.fields, self.size, self.slide
        buf = self.buf
        cols = buf.columns
        ns, ks, ts, fs = cols["n"], cols["k"], cols["t"], cols["f"]
        vcols = [cols[f"v{i}"] for i in range(len(fields))]
        moved = False
        for item in items:
            try:
                t, k, values = window_input(item[0], tf, kf, fields)
            except (KeyError, TypeError) as e:
                self.reject(self.name, item, reason(e))
                continue
            wm = self.watermark
            last = t - t % slide
            if wm is None or t > wm:
                self.watermark = t
                moved = True
                floor = NO_TIME if wm is None else wm
            else:
                floor = wm
                if wm >= last + slide:  # some of its windows closed before it came
                    self.late += (min(wm, last + size) - last - slide) // slide + 1
                    if wm >= last + size:
                        continue  # it feeds no open window
            ns.append(self.n)
            ks.append(k)
            ts.append(t)
            fs.append(floor)
            for col, v in zip(vcols, values, strict=True):
                col.append(v)
            self.n += 1
            buf.min_t = min(buf.min_t, t)
            buf.max_end = max(buf.max_end, last + size)
            self.min_end = min(self.min_end, last + slide)
        self.max_end = max(self.max_end, buf.max_end)
        if moved:
            self._moved()

    def advance(self, stime: int) -> None:
        if self.watermark is None or stime > self.watermark:
            self.watermark = stime
            self._moved()

    def _moved(self) -> None:
        """The watermark moved: windows up to it are decided. With no tuple feeding any of them there is
        nothing to compute, and they count as emitted at once; otherwise they are held until a flush."""
        if self.held() is None:
            if self.watermark is not None and self.max_end <= self.emitted:
                self.emitted = self.watermark
        elif self.since is None:
            self.since = time.monotonic()

    # -- output -------------------------------------------------------------------------
    def held(self) -> int | None:
        wm, done = self.watermark, self.emitted
        if wm is None or wm <= done or self.max_end <= done:
            return None
        first = self.min_end if done == NO_TIME else done + 1 + (-(done + 1)) % self.slide
        return first if first <= wm else None

    def due(self, now: float) -> bool:
        if len(self.buf.columns["n"]) >= MAX_BUFFER:
            return True
        return self.since is not None and now - self.since >= self.flush_s

    def flush(self, progress: Callable[[], None]) -> None:
        """Write the buffer as a segment, then compute and emit every window decided since the last flush."""
        if self.buf.columns["n"]:
            b = self.buf
            self.segments += (self.store.write(b.columns, b.min_t, b.max_end),)
            self.buf = self._empty()
        if self.held() is not None:
            assert self.watermark is not None
            self._emit(self.emitted, self.watermark, progress)
        self.segments = tuple(s for s in self.segments if s.max_end > self.emitted)
        self.store.collect(self.segments)

    def _emit(self, after: int, upto: int, progress: Callable[[], None]) -> None:
        paths = self.store.paths(tuple(s for s in self.segments if s.max_end > after and s.min_t < upto))
        t0 = time.monotonic()
        rows = in_thread(lambda: closed_windows(self.spark, paths, self.shape, after, upto), progress)
        log.debug("%d windows from %d segments in %.0f ms", len(rows), len(paths), (time.monotonic() - t0) * 1000)
        size, aggs, fields = self.size, self.aggs, self.fields
        out = [window_result(aggs, fields, k, end - size, end, acc) for end, k, acc in rows]
        self.emitted = upto
        self.since = None
        if out:
            self.emit(out)
