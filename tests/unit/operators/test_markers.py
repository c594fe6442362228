"""Stream markers (``Operator.oldest_time``) are in stime, whatever the operator's ``time`` field.

ha-review D8: a window named its oldest open window's start, in the units of its ``time`` field,
where upstream backup's acks and DPC's undo log compare the marker with stimes. With a time field
that runs ahead of stime (a map's ``ts: ts + 60000``), they dropped input still in open windows.
"""

from __future__ import annotations

import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.core.tuples import NO_TIME
from services.operators.base import Item
from services.operators.join import WindowJoin
from services.operators.window import WindowAggregate
from services.spec import Aggregate

AGGS = [Aggregate("count", "count", None), Aggregate("sum", "sum", "value")]


def window(size: int = 300, slide: int = 100) -> WindowAggregate:
    return WindowAggregate("w", "sensor", "t", size, slide, AGGS)


def items(stimes: list[int], ahead: int) -> list[Item]:
    """Readings at these stimes whose time field ``t`` is ``ahead`` ms later, over two keys."""
    return [({"sensor": "xy"[i % 2], "t": s + ahead, "value": 1.0}, s) for i, s in enumerate(stimes)]


def expected(op: WindowAggregate, fed: list[Item]) -> int | None:
    """The smallest stime of a fed tuple in a window still open (in-order input: none is late)."""
    starts = list(op.windows)
    held = [s for rec, s in fed if any(w <= rec["t"] < w + op.size for w in starts)]
    return min(held) if held else None


def copied(x: Any) -> Any:
    return pickle.loads(pickle.dumps(x))


def test_a_window_whose_time_runs_ahead_names_the_stime_of_its_oldest_open_windows_first_tuple() -> None:
    op = window()
    fed = items([1000 + 50 * i for i in range(10)], 60_000)
    standby = window()
    op.push(0, fed[:3])
    standby.apply_delta(copied(op.delta()))  # the first delta is the whole state
    op.push(0, fed[3:])
    op.advance(1450)  # a time promise in stime: it closes nothing of windows in the time field's units
    standby.apply_delta(copied(op.delta()))
    # Open: [61200, 61500), [61300, 61600), [61400, 61700); the oldest opened with t 61200, stime 1200.
    assert sorted(op.windows) == [61_200, 61_300, 61_400]
    assert op.oldest_time(0) == 1200 == expected(op, fed)
    restored = window()
    restored.set_state(copied(op.state()))
    assert restored.oldest_time(0) == 1200
    assert standby.oldest_time(0) == 1200
    assembled = window()
    for pid in op.part_ids():
        assembled.load_part(pid, copied(op.part(pid)))
    assert assembled.oldest_time(0) == 1200  # every part of a window carries the window's marker
    op.push(0, items([1500], 60_000))  # closes [61200, 61500): the next oldest opened with stime 1300
    assert op.oldest_time(0) == 1300 == expected(op, fed + items([1500], 60_000))
    op.clear()
    assert op.oldest_time(0) is None


def test_a_state_without_markers_keeps_all_its_input() -> None:
    """A state saved before windows kept markers: their first stime is unknown, so the marker is
    earlier than every tuple time, which keeps more input rather than less."""
    op = window()
    op.push(0, items([1000, 1100], 60_000))
    windows, watermark, late = op.state()[:3]  # type: ignore[index]
    old = window()
    old.set_state((windows, watermark, late))
    assert old.oldest_time(0) == NO_TIME
    pid = old.part_ids()[0]
    part = window()
    k, start = pid
    part.load_part(pid, copied(old.windows[start][k].__getstate__()))  # a part as it was saved before
    assert part.oldest_time(0) == NO_TIME
    old.push(0, items([1200], 60_000 + 400))  # closes every window of the old state: real markers from here
    assert old.oldest_time(0) == 1200


@st.composite
def feeds(draw: Any) -> tuple[int, list[list[Item]], list[bool]]:
    """How far the time field runs ahead of stime, batches of in-order readings, and after each
    batch whether to take a delta (with a time promise before it)."""
    ahead = draw(st.sampled_from([0, 7, 60_000, 10**6]))
    s, batches = 0, []
    for _ in range(draw(st.integers(1, 12))):
        stimes = []
        for _ in range(draw(st.integers(0, 8))):
            s += draw(st.integers(0, 40))
            stimes.append(s)
        batches.append(items(stimes, ahead))
    return ahead, batches, [draw(st.booleans()) for _ in batches]


@settings(max_examples=150, deadline=None)
@given(feeds())
def test_the_marker_is_the_smallest_stime_in_open_windows_on_every_copy(case: tuple) -> None:
    _, batches, deltas = case
    op, standby, fed = window(40, 20), window(40, 20), []
    for batch, delta in zip(batches, deltas, strict=True):
        op.push(0, batch)
        fed += batch
        if delta:
            op.advance(fed[-1][1] if fed else 0)
            standby.apply_delta(copied(op.delta()))
            assert standby.oldest_time(0) == op.oldest_time(0)
        assert op.oldest_time(0) == expected(op, fed)
        restored = window(40, 20)
        restored.set_state(copied(op.state()))
        assert restored.oldest_time(0) == op.oldest_time(0)


def test_a_join_loaded_part_by_part_names_its_oldest_stime_in_any_order() -> None:
    """Tuples of one time and different stimes: the order rebuilt from parts puts the earlier stime first."""
    join = WindowJoin("j", "sensor", "sensor", "t", 5, {"v": "left.value"}, ["sensor", "t", "value"], ["value"])
    join.push(0, [({"sensor": "x", "t": 100, "value": 1.0}, 3), ({"sensor": "y", "t": 100, "value": 2.0}, 5)])
    assert join.oldest_time(0) == 3
    for pids in (join.part_ids(), join.part_ids()[::-1]):
        copy = WindowJoin("j", "sensor", "sensor", "t", 5, {"v": "left.value"}, ["sensor", "t", "value"], ["value"])
        for pid in pids:
            copy.load_part(pid, copied(join.part(pid)))
        assert copy.oldest_time(0) == 3, pids
