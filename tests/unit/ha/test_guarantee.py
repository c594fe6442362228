"""The gap-recovery check finds the runs an output lost and refuses anything else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.ha.guarantee import NotGapRecovery, gap_runs


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
