"""The workloads of the benches and the fault tests: what the sources send, and the paced sending of it.

Two loops pace a workload, and only two:

* ``services.client.pump.pump`` (the product's, behind ``hastream produce``): one source,
  records sent at a rate, a BOUNDARY every ``dpc.boundary_interval`` of wall clock. The
  throughput bench uses it for its pre-loaded and its paced inputs.
* ``PacedSources`` (here): several sources in lockstep on the wall clock, a BOUNDARY after
  every batch at the batch's event time, and a source that can be cut off for a while (its
  tuples generated on time, delivered when it heals). The Borealis experiments and the fault
  tests use it, so failures overlap a stream whose timing is known tuple by tuple.

The records are deterministic: ``tick_records`` (input ``i``'s record ``j``, the Borealis
chain's pass-through workload) and ``readings_workload`` (the sensor readings of
``services.client.workload.readings``, for nodes that aggregate).

The specs of the throughput bench's nodes (``filter_map_spec``, ``throughput_window_spec``,
``window_spec``) and its readings (``reading_records``) are here too, since ``bench/dpc_cost.py``,
``bench/spark_window.py`` and the Borealis experiments run the same nodes on the same input.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any

from services.client.source import END_OF_TIME, SourceWriter
from services.client.workload import readings
from services.spec import Spec

BASE_TS = 1_700_000_000_000  # event time of every workload's first tuple
SENSORS = 20  # the throughput bench's readings: distinct sensors
WINDOW_SIZE_MS, WINDOW_SLIDE_MS = 2000, 500  # the throughput bench's sliding window

Record = dict[str, Any]


def tick_records(i: int, rate: int, ticks: int | None = None, base_ts: int = BASE_TS) -> Iterator[Record]:
    """Input ``i``'s records ``j = 0, 1, ...`` (``ticks`` of them, or without end): sensor ``in<i>``,
    event time ``base_ts + j * (1000 // rate)``, value ``j % 50``, seq ``j``. Every input is in step."""
    step = 1000 // rate
    for j in range(ticks) if ticks is not None else itertools.count():
        yield {"sensor": f"in{i}", "ts": base_ts + j * step, "value": float(j % 50), "seq": j}


def tick_workload(names: list[str], rate: int, ticks: int) -> dict[str, list[Record]]:
    """``tick_records`` of input 1, 2, ... for each stream of ``names``."""
    return {s: list(tick_records(i, rate, ticks)) for i, s in enumerate(names, 1)}


def readings_workload(
    names: list[str], n: int, rate: int, sensors: int = 4, start_ms: int = BASE_TS
) -> dict[str, list[Record]]:
    """``n`` sensor readings per stream (stream k seeded ``k + 1``), event time advancing ``1000 // rate`` ms."""
    return {
        s: list(readings(n, sensors=sensors, seed=i + 1, step_ms=1000 // rate, start_ms=start_ms))
        for i, s in enumerate(names)
    }


class PacedSources:
    """Sends ``workload[stream]`` records at ``rate`` per second per stream from a thread.

    Record k of every stream is due ``k / rate`` s after the start, so the streams advance
    together; a BOUNDARY at the last record's event time + 1 follows every batch. A workload
    may be an endless iterable: then the sources run until ``stop()``. ``hold(stream,
    seconds)`` models a disconnected input: its tuples are generated on time but delivered
    when it heals. At the end every source sends the final boundary (``END_OF_TIME``).
    ``pause_at(k, boundary)`` stops every source before its record ``k``, as a source process that
    stopped after a last BOUNDARY, until ``resume()``, after which each is a new writer (a restarted
    process) that goes on from its log's tail, on the same pace.
    ``sent_at`` maps each record's event time to the wall time (monotonic) it was generated;
    ``first_held`` each held stream to when its first held record was generated, which may be
    before ``hold`` was called if the source thread stood still between stamping and sending.
    """

    def __init__(self, spec: Spec, bootstrap: str, workload: Mapping[str, Iterable[Record]], rate: float) -> None:
        self.spec, self.rate, self.bootstrap = spec, rate, bootstrap
        self.writers = {s: SourceWriter(spec, s, bootstrap) for s in workload}
        self._records = {s: iter(w) for s, w in workload.items()}
        sized = [len(w) for w in workload.values() if isinstance(w, Sized)]
        self._total = max(sized) if len(sized) == len(workload) else None  # None: until stop() or exhausted
        self.held_until: dict[str, float] = {}
        self.first_held: dict[str, float] = {}
        self.sent_at: dict[int, float] = {}  # event time -> wall time it was generated
        self.done = threading.Event()
        self._stop = threading.Event()
        self._pause, self._paused, self._go = threading.Event(), threading.Event(), threading.Event()
        self._pause_at, self._last_boundary = 0, 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PacedSources:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End an endless workload: no record after the current batch, then the final boundary."""
        self._stop.set()

    def pause_at(self, k: int, boundary: int) -> None:
        """Stop every source before its record ``k``, once it has sent a BOUNDARY at ``boundary`` (at most
        the stime of record ``k`` and after: a source idle until then would say as much)."""
        self._pause_at, self._last_boundary = k, boundary
        self._go.clear()
        self._paused.clear()
        self._pause.set()

    def wait_paused(self, timeout: float) -> None:
        if not self._paused.wait(timeout):
            raise TimeoutError(f"the sources did not stop within {timeout:.0f} s")

    def resume(self) -> None:
        """Start every source again as a new writer."""
        self._pause.clear()
        self._go.set()

    def _stand_still(self) -> float:
        """While paused (after the last boundary, all flushed); then new writers. Returns the seconds it stood."""
        began = time.monotonic()
        for w in self.writers.values():
            w.boundary(self._last_boundary)
            w.flush()
        self._paused.set()
        self._go.wait()
        self.writers = {s: SourceWriter(self.spec, s, self.bootstrap) for s in self.writers}
        return time.monotonic() - began

    def hold(self, stream: str, seconds: float) -> None:
        self.held_until[stream] = time.monotonic() + seconds  # first: a record held is always seen as held
        self.writers[stream].hold()

    def _run(self) -> None:
        n = self._total
        exhausted: set[str] = set()
        t0 = time.monotonic()
        k = 0
        while (n is None or k < n) and not self._stop.is_set():
            if self._pause.is_set() and k >= self._pause_at:
                t0 += self._stand_still()
            now = time.monotonic()
            due = int((now - t0) * self.rate) + 1
            if n is not None:
                due = min(n, due)
            if self._pause.is_set():
                due = min(due, self._pause_at)
            for s, w in self.writers.items():
                until = self.held_until.get(s)
                if until is not None and now >= until:
                    del self.held_until[s]
                    w.release()
                recs = list(itertools.islice(self._records[s], due - k))
                if len(recs) < due - k:
                    exhausted.add(s)
                if recs and s in self.held_until:
                    self.first_held.setdefault(s, now)
                for rec in recs:
                    w.send(rec)
                    self.sent_at.setdefault(rec["ts"], now)
                if recs:
                    w.boundary(recs[-1]["ts"] + 1)
                if s not in self.held_until:
                    w.flush()
            k = due
            if len(exhausted) == len(self.writers):
                break
            time.sleep(max(0.0, t0 + k / self.rate - time.monotonic()))
        while self.held_until:
            time.sleep(0.05)
            for s in list(self.held_until):
                if time.monotonic() >= self.held_until[s]:
                    del self.held_until[s]
                    self.writers[s].release()
        for w in self.writers.values():
            w.boundary(END_OF_TIME)
            w.flush()
        self.done.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


# ---------------------------------------------------------------------------- specs


def dpc_section(bucket_ms: int | None) -> str:
    """A spec's dpc section with SUnion buckets and boundaries every ``bucket_ms`` (the paper's
    setting for its serialization overhead), or nothing for the defaults."""
    return f"dpc: {{bucket: {bucket_ms}, boundary_interval: {bucket_ms}}}\n" if bucket_ms else ""


def filter_map_spec(name: str, source: str, bucket_ms: int | None = None) -> str:
    return f"""
name: {name}
{dpc_section(bucket_ms)}streams:
  {source}: {{schema: reading, key: sensor, partitions: 1, topic: {source}}}  # the one pre-loaded input
  {name}_kept: {{schema: reading, key: sensor, partitions: 1}}
  {name}_out: {{schema: reading, key: sensor, partitions: 1}}
operators:
  keep_all:
    type: filter
    input: {source}
    output: {name}_kept
    where: "value > -1000"   # readings stay within [-20, 120]: every tuple passes
  to_fahrenheit:
    type: map
    input: {name}_kept
    output: {name}_out
    fields: {{sensor: sensor, ts: ts, value: "value * 1.8 + 32", seq: seq}}
nodes:
  ingest: {{operators: [keep_all, to_fahrenheit]}}
"""


def throughput_window_spec(name: str, source: str, bucket_ms: int | None = None) -> str:
    return window_spec(name, source, dpc_section(bucket_ms))


def window_spec(
    name: str, source: str, dpc: str = "", size: int = WINDOW_SIZE_MS, slide: int = WINDOW_SLIDE_MS, engine: str = ""
) -> str:
    """The benches' sliding window per sensor over one pre-loaded input; ``dpc``: the spec's dpc
    section (a line), ``engine``: the node's, if not the default."""
    node = f"{{operators: [per_sensor], engine: {engine}}}" if engine else "{operators: [per_sensor]}"
    return f"""
name: {name}
{dpc}streams:
  {source}: {{schema: reading, key: sensor, partitions: 1, topic: {source}}}  # the one pre-loaded input
  {name}_out: {{schema: window_stat, key: key, partitions: 1}}
operators:
  per_sensor:
    type: window
    input: {source}
    output: {name}_out
    key: sensor
    size: {size}
    slide: {slide}
    aggregates: {{count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  stats: {node}
"""


def reading_records(n: int, rng_seed: int = 7, wall_clock: bool = False) -> Iterator[dict[str, Any]]:
    return readings(n, sensors=SENSORS, seed=rng_seed, wall_clock=wall_clock)
