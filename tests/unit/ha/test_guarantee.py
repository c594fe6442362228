"""The gap-recovery check finds the runs an output lost, the repeating-rollback check the runs a log
holds again; each refuses anything else."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.ha.guarantee import NotGapRecovery, NotRepeatingRecovery, gap_runs, repeated_runs


def test_an_output_with_runs_left_out_gives_those_runs() -> None:
    want = list(range(10))
    assert gap_runs(want, want) == []
    assert gap_runs(want, [0, 1, 5, 6, 9]) == [range(2, 5), range(7, 9)]
    assert gap_runs(want, [3, 4]) == [range(0, 3), range(5, 10)]
    assert gap_runs(want, []) == [range(0, 10)]


@pytest.mark.parametrize("got", [[0, 1, 1, 2], [0, 2, 1], [0, 1, 99]], ids=["repeat", "reorder", "invented"])
def test_a_repeated_reordered_or_invented_tuple_is_no_gap_recovery(got: list[int]) -> None:
    with pytest.raises(NotGapRecovery):
        gap_runs([0, 1, 2, 3], got)


@given(st.integers(1, 60), st.lists(st.tuples(st.integers(0, 59), st.integers(1, 10)), max_size=4))
def test_the_runs_found_are_the_runs_cut(n: int, cuts: list[tuple[int, int]]) -> None:
    want = list(range(n))
    lost = sorted({i for start, size in cuts for i in range(start, min(n, start + size))})
    got = [t for t in want if t not in set(lost)]
    runs = gap_runs(want, got)
    assert [i for r in runs for i in r] == lost
    assert all(a.stop < b.start for a, b in zip(runs, runs[1:], strict=False))  # maximal: adjacent cuts are one run


def _log(ids: list[int]) -> list[tuple[int, str]]:
    return [(i, f"t{i}") for i in ids]


def test_a_log_written_again_from_earlier_points_gives_those_runs() -> None:
    assert repeated_runs(_log(list(range(6)))) == []  # precise: nothing repeated
    assert repeated_runs(_log([0, 1, 2, 3, 1, 2, 3, 4])) == [range(1, 4)]
    assert repeated_runs(_log([0, 1, 2, 2, 3, 4, 3, 4, 5])) == [range(2, 3), range(3, 5)]
    # a second failure while the first one's duplicates are written: a rollback inside a rollback
    assert repeated_runs(_log([0, 1, 2, 3, 4, 5, 2, 3, 1, 2, 3, 4, 5, 6])) == [range(2, 4), range(1, 6)]


@pytest.mark.parametrize(
    "log",
    [
        _log([0, 1, 3]),  # 2 lost
        _log([0, 1, 2, 3, 1, 3, 4]),  # the run written again skips 2
        _log([1, 2]),  # 0 lost
        _log([0, 1, 2]) + [(1, "other")],  # a duplicate that differs: convergent or divergent, not repeating
    ],
    ids=["lost", "skipped-in-repeat", "lost-first", "differs"],
)
def test_a_lost_skipped_or_different_tuple_is_no_repeating_recovery(log: list[tuple[int, str]]) -> None:
    with pytest.raises(NotRepeatingRecovery):
        repeated_runs(log)


@given(st.integers(1, 40), st.lists(st.tuples(st.integers(0, 39), st.integers(0, 39)), max_size=4))
def test_the_runs_found_are_the_rollbacks_made(n: int, backs: list[tuple[int, int]]) -> None:
    """Write ids 0..n-1, going back at random points to random earlier ids: the runs found are those."""
    ids: list[int] = []
    at = 0
    for where, to in sorted(backs):
        stop = min(where, n - 1) + 1
        ids += range(at, stop)
        start = min(to, stop - 1)
        at = start
    ids += range(at, n)
    # every id written more than once is in a run, as often as it was written again
    runs = repeated_runs(_log(ids))
    assert sorted(i for r in runs for i in r) == sorted(
        i for i, c in collections.Counter(ids).items() for _ in range(c - 1)
    )


def test_a_trimmed_log_is_checked_from_its_start() -> None:
    """A log upstream backup trimmed starts at some id: a rollback may repeat ids trimmed since (not
    comparable any more), a lost or changed tuple after the start is still found."""
    log = [(i, f"t{i}") for i in range(6, 9)] + [(i, f"t{i}") for i in range(5, 10)]  # trimmed inside a run
    assert repeated_runs(log, 6) == [range(5, 9)]
    with pytest.raises(NotRepeatingRecovery, match="a tuple was lost"):
        repeated_runs([(6, "t6"), (8, "t8")], 6)
    with pytest.raises(NotRepeatingRecovery, match="repeated as"):
        repeated_runs([(6, "t6"), (7, "t7"), (6, "x")], 6)
    with pytest.raises(NotRepeatingRecovery, match="id 6 where 0 was due"):
        repeated_runs([(6, "t6")])  # from 0 unless told: the start is part of what is checked
