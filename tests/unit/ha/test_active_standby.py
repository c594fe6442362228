"""Active standby's trim: the secondary's log keeps every tuple downstream may lack, and beyond
that only ties with the acknowledged tuple (ICDE 2005, section 5.3)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.ha.active_standby import dominated, trim_offset

IN = "up.out:0"


def window_outputs(times: list[int], size: int, slide: int) -> list[tuple[tuple[int, int], dict[str, int]]]:
    """A sliding count over tuple time; each result's high watermark is its window's last input offset."""
    last: dict[int, int] = {}
    counts: dict[int, int] = {}
    out = []
    for off, t in enumerate(times):
        top = (t // slide) * slide
        for s in sorted(w for w in counts if w + size <= t):
            out.append(((s, counts.pop(s)), {IN: last.pop(s)}))
        for s in range(top - size + slide, top + 1, slide):
            counts[s] = counts.get(s, 0) + 1
            last[s] = off
    return out


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(st.integers(1, 4), min_size=8, max_size=120),
    shape=st.sampled_from([(4, 4), (6, 2), (10, 5), (3, 1)]),
    acked=st.floats(0, 1),
    secondary=st.floats(0, 1),
)
def test_the_trimmed_secondary_log_holds_all_downstream_lacks_and_only_ties_before(
    steps: list[int], shape: tuple[int, int], acked: float, secondary: float
) -> None:
    times = [sum(steps[: i + 1]) for i in range(len(steps))]
    out = window_outputs(times, *shape)
    if not out:
        return
    v = int(acked * (len(out) - 1))  # downstream has the primary's output up to here
    trim = out[v][1]
    made = int(secondary * len(out))  # how far the secondary has come (behind or ahead)
    log = [(off * 3, hwm) for off, (_, hwm) in enumerate(out[:made])]  # its own offsets
    start = trim_offset(log, trim)
    # It keeps its log from ``start``; what it makes later is checked against the same trim.
    kept = [i for i in range(made) if log[i][0] >= start] if start is not None else []
    kept += [i for i in range(made, len(out)) if not dominated(out[i][1], trim)]
    assert kept == list(range(kept[0], len(out))) and kept[0] <= v + 1  # nothing downstream lacks is gone
    assert all(out[i][1] == trim for i in kept if i <= v)  # duplicates only where the watermark ties


def test_a_tuple_is_dropped_only_when_below_the_trim_on_every_input() -> None:
    trim = {"a": 200, "b": 100}
    assert dominated({"a": 199, "b": 99}, trim)
    assert not dominated({"a": 199, "b": 100}, trim)  # a tie is kept
    assert not dominated({"a": 250, "b": 10}, trim)
    assert trim_offset([(0, {"a": 1, "b": 1}), (4, {"a": 200, "b": 5})], trim) == 4
    assert trim_offset([(0, {"a": 1, "b": 1})], trim) is None
