"""The Spark window against the Python window operator: the same output, tuple for tuple and bit for bit.

A real local Spark session runs the jobs. Whatever the flush pattern, a rollback to a
snapshot, or a restore in another instance (another process, another host) on the same
checkpoint folder, the output sequence is the Python operator's for the same input.
"""

from __future__ import annotations

import pickle
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.core.errors import RestartImageError
from services.operators.base import Item
from services.operators.window import WindowAggregate
from services.spec import Aggregate
from spark_jobs.segments import SegmentStore
from spark_jobs.session import spark_session
from spark_jobs.window import SparkWindow

pytestmark = pytest.mark.spark

AGGS = (
    Aggregate("count", "count", None),
    Aggregate("sum", "sum", "value"),
    Aggregate("avg", "avg", "value"),
    Aggregate("min", "min", "value"),
    Aggregate("max", "max", "value"),
)
TYPES = {"sensor": "string", "ts": "long", "value": "double", "seq": "long"}
SIZE, SLIDE = 1000, 250


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("hastream-test-window")
    yield session
    session.stop()


def spark_window(spark: Any, folder: Path, size: int = SIZE, slide: int = SLIDE) -> SparkWindow:
    return SparkWindow(
        "w", "sensor", "ts", size, slide, AGGS, TYPES, lambda cols: SegmentStore(folder, cols), spark, flush_ms=0
    )


def python_window(size: int = SIZE, slide: int = SLIDE) -> WindowAggregate:
    return WindowAggregate("w", "sensor", "ts", size, slide, AGGS)


def readings(seed: int, n: int, keys: int = 7, late_every: int = 9) -> list[Item]:
    """Tuples mostly in time order, some up to 1.5 windows late, values with many significant bits."""
    rnd = random.Random(seed)
    out: list[Item] = []
    t = 1_000_000
    for i in range(n):
        t += rnd.randint(0, 40)
        ts = t - rnd.randint(0, 1500) if i % late_every == 0 else t
        rec = {"sensor": f"s{rnd.randrange(keys)}", "ts": ts, "value": rnd.uniform(-50, 150) / 3, "seq": i}
        out.append((rec, ts))
    return out


def collect(op: Any) -> list[Item]:
    out: list[Item] = []
    op.emit = out.extend
    return out


def feed(op: Any, items: list[Item], steps: list[tuple[int, int | None, bool]]) -> None:
    """Push ``items`` in the given (batch end, advance to, flush) steps; flush only matters to Spark."""
    i = 0
    for end, adv, flush in steps:
        op.push(0, items[i:end])
        i = end
        if adv is not None:
            op.advance(adv)
        if flush and isinstance(op, SparkWindow):
            op.flush(lambda: None)


def random_steps(seed: int, items: list[Item], flushes: int) -> list[tuple[int, int | None, bool]]:
    rnd = random.Random(seed)
    ends = sorted(rnd.sample(range(1, len(items)), 24)) + [len(items)]
    flush_at = set(rnd.sample(range(len(ends)), flushes))
    steps = []
    for j, end in enumerate(ends):
        adv = items[end - 1][1] + rnd.randint(0, 300) if rnd.random() < 0.3 else None
        steps.append((end, adv, j in flush_at))
    return steps


def finish(op: Any, t: int) -> None:
    op.advance(t)
    if isinstance(op, SparkWindow):
        op.flush(lambda: None)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_output_as_the_python_window_whatever_the_flushes(spark: Any, tmp_path: Path, seed: int) -> None:
    items = readings(seed, 1500)
    steps = random_steps(seed, items, flushes=4)
    py, sp = python_window(), spark_window(spark, tmp_path)
    want, got = collect(py), collect(sp)
    feed(py, items, steps)
    feed(sp, items, steps)
    end = max(t for _, t in items) + SIZE
    finish(py, end)
    finish(sp, end)
    assert len(want) > 100
    assert got == want  # records (floats bit for bit) and stimes, in order
    assert sp.late == py.late > 0


def test_held_results_keep_the_boundary_below_them(spark: Any, tmp_path: Path) -> None:
    items = readings(4, 400, late_every=10**9)
    sp = spark_window(spark, tmp_path)
    got = collect(sp)
    sp.push(0, items)
    frontier = items[-1][1]
    sp.advance(frontier)
    held = sp.held()
    assert held is not None and not got and sp.due(time.monotonic())
    sp.flush(lambda: None)
    assert got and min(t for _, t in got) >= held
    assert max(t for _, t in got) <= frontier and sp.held() is None


def test_a_rollback_to_a_snapshot_forgets_what_came_after(spark: Any, tmp_path: Path) -> None:
    """Checkpoint/redo: state() before a failure, tentative input processed and flushed, then
    set_state(): the redo gives what the Python window gives without the tentative input."""
    items = readings(5, 1200)
    junk = [({**r, "value": r["value"] + 1000.0}, t) for r, t in items[600:900]]  # a tentative version
    py, sp = python_window(), spark_window(spark, tmp_path)
    want, got = collect(py), collect(sp)
    for op in (py, sp):
        op.push(0, items[:600])
        op.advance(items[599][1])
    sp.flush(lambda: None)
    saved = pickle.dumps(sp.state())
    n_before = len(got)
    sp.push(0, junk)
    sp.advance(junk[-1][1])
    sp.flush(lambda: None)
    assert len(got) > n_before  # tentative results came out
    del got[n_before:]
    sp.set_state(pickle.loads(saved))
    for op in (py, sp):
        op.push(0, items[600:])
    end = max(t for _, t in items) + SIZE
    finish(py, end)
    finish(sp, end)
    assert got == want


def test_another_instance_continues_from_the_state_in_the_same_folder(spark: Any, tmp_path: Path) -> None:
    """A restart (or another host with the same shared folder) continues from a restart image."""
    items = readings(7, 1000)
    py, first = python_window(), spark_window(spark, tmp_path)
    want, got = collect(py), collect(first)
    py.push(0, items)
    first.push(0, items[:500])
    first.advance(items[499][1])
    first.flush(lambda: None)
    image = pickle.dumps(first.state())
    second = spark_window(spark, tmp_path)
    second.emit = got.extend
    second.set_state(pickle.loads(image))
    second.push(0, items[500:])
    end = max(t for _, t in items) + SIZE
    finish(py, end)
    finish(second, end)
    assert got == want


def test_a_state_whose_segments_are_gone_is_refused_with_one_line(spark: Any, tmp_path: Path) -> None:
    items = readings(8, 300)
    first = spark_window(spark, tmp_path / "a")
    first.push(0, items)
    first.advance(items[-1][1])
    first.flush(lambda: None)
    image = pickle.dumps(first.state())
    elsewhere = spark_window(spark, tmp_path / "b")
    with pytest.raises(RestartImageError, match="shared storage") as e:
        elsewhere.set_state(pickle.loads(image))
    assert "\n" not in str(e.value)


def test_segments_are_deleted_once_no_window_or_snapshot_needs_them(spark: Any, tmp_path: Path) -> None:
    items = readings(9, 2000, late_every=10**9)
    sp = spark_window(spark, tmp_path, size=500, slide=500)
    collect(sp)
    pinned_state = None
    for k in range(0, 2000, 200):
        sp.push(0, items[k : k + 200])
        sp.advance(items[k + 199][1])
        sp.flush(lambda: None)
        if k == 400:
            pinned_state = sp.state()
    assert pinned_state is not None
    files = {p.name for p in tmp_path.iterdir()}
    live = {s.name for s in sp.segments}
    assert live <= files
    assert len(sp.segments) <= 3  # a 500 ms window over ~4 s of input keeps only the newest
    assert {s.name for s in pinned_state[0]} <= files  # type: ignore[index]
    for _ in range(8):  # newer snapshots push the old one out
        sp.state()
    sp.push(0, items[-1:])
    sp.flush(lambda: None)
    assert {p.name for p in tmp_path.iterdir()} == {s.name for s in sp.segments}
