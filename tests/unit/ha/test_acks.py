"""Upstream backup's acknowledgements: trimming at the level-1 ack never deletes an input tuple a
recovery needs (ICDE 2005, section 5.2), for random inputs, windows and acknowledgements."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.ha.acks import CauseMap, level1, received, trim_point

IN = "up.out:0"


@dataclass
class SlidingCount:
    """A sliding-window count over tuple time, windows aligned on ``slide`` (convergent-capable).
    Each output carries its low watermark: the oldest input offset in a window not yet emitted."""

    size: int
    slide: int
    first: dict[int, int] = field(default_factory=dict)  # open window start -> offset of its first tuple
    counts: dict[int, int] = field(default_factory=dict)

    def push(self, offset: int, t: int) -> list[tuple[tuple[int, int], dict[str, int]]]:
        last = (t // self.slide) * self.slide
        for s in range(last - self.size + self.slide, last + 1, self.slide):
            self.first.setdefault(s, offset)
            self.counts[s] = self.counts.get(s, 0) + 1
        out = []
        for s in sorted(w for w in self.counts if w + self.size <= t):  # closed by this tuple, in start order
            mark = min(self.first.values())  # the windows still to emit hold tuples a recovery needs
            out.append(((s, self.counts.pop(s)), {IN: mark}))
            del self.first[s]
        return out


def run(times: list[int], start: int, size: int, slide: int) -> list[tuple[tuple[int, int], dict[str, int]]]:
    op = SlidingCount(size, slide)
    return [o for off in range(start, len(times)) for o in op.push(off, times[off])]


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(st.integers(1, 4), min_size=5, max_size=120),
    shape=st.sampled_from([(4, 4), (6, 2), (10, 5), (9, 3), (3, 1)]),
    readers=st.lists(st.floats(0, 1), min_size=1, max_size=3),
)
def test_a_recovery_from_the_trim_point_regenerates_everything_downstream_has_not_received(
    steps: list[int], shape: tuple[int, int], readers: list[float]
) -> None:
    times = [sum(steps[: i + 1]) for i in range(len(steps))]
    size, slide = shape
    want = run(times, 0, size, slide)
    causes = CauseMap()
    for offset, (_, marks) in enumerate(want):
        causes.record(offset * 2, marks)  # output offsets with gaps, as transactions leave them
    if not want:
        return
    level0 = {f"d{i}": int(f * (len(want) - 1)) * 2 for i, f in enumerate(readers)}
    acks = level1({"out": (causes, received(level0))}, [IN])
    assert acks is not None
    u = trim_point({"n": acks[IN]})
    assert u is not None
    # The node fails; its recovery starts empty and reads the input log from where it was trimmed.
    v = received(level0) // 2  # type: ignore[operator]
    regenerated = [w for w, _ in run(times, u, size, slide)]
    after = [w for w in regenerated if w[0] > want[v][0][0]]  # convergent: drop duplicates by window
    assert after == [w for w, _ in want[v + 1 :]]


@settings(max_examples=300, deadline=None)
@given(acks=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.none() | st.integers(0, 1000), min_size=1))
def test_the_trim_point_is_the_oldest_ack_and_nothing_while_a_reader_has_not_acked(acks: dict[str, int | None]) -> None:
    got = trim_point(acks)
    if any(v is None for v in acks.values()):
        assert got is None
    else:
        assert got == min(v for v in acks.values() if v is not None)
        assert all(got <= v for v in acks.values() if v is not None)


def test_trim_point_with_no_registered_reader_trims_nothing() -> None:
    assert trim_point({}) is None


def test_the_papers_figure_5() -> None:
    """Na's output O: Nb acks level-0 125, Nc 123; O[123] was caused by (I1, 200) and (I2, 100)."""
    causes = CauseMap()
    causes.record(100, {"I1": 150, "I2": 80})
    causes.record(123, {"I1": 200, "I2": 100})
    causes.record(125, {"I1": 210, "I2": 104})
    v = received({"Nb": 125, "Nc": 123})
    assert v == 123
    assert level1({"O": (causes, v)}, ["I1", "I2"]) == {"I1": 200, "I2": 100}
    assert trim_point({"Nb": 50, "Nc": 55}) == 50  # Na removes the tuples before O[50]


def test_cause_carries_forward_over_offsets_without_a_tuple_and_survives_pruning() -> None:
    causes = CauseMap()
    causes.record(10, {IN: 3})
    causes.record(14, {IN: 7})
    assert causes.cause(9) is None
    assert causes.cause(12) == {IN: 3}
    causes.prune(13)
    assert causes.cause(13) == {IN: 3} and causes.cause(20) == {IN: 7} and len(causes) == 2
    causes.prune(14)
    assert len(causes) == 1 and causes.cause(14) == {IN: 7}
    with pytest.raises(ValueError, match="not after"):
        causes.record(14, {IN: 8})


def test_no_level1_ack_until_every_output_has_been_received_somewhere() -> None:
    a, b = CauseMap(), CauseMap()
    a.record(0, {IN: 5})
    assert level1({"a": (a, 0), "b": (b, None)}, [IN]) is None
    b.record(0, {IN: 2})
    assert level1({"a": (a, 0), "b": (b, 0)}, [IN]) == {IN: 2}  # the earliest over the outputs
