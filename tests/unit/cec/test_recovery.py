"""CEC recovery over every crash point (the digest's property tests, no broker).

A keyed time or count window runs under the checkpointer on skewed keys, in batches (each a
transaction: a crash leaves a prefix of whole batches in the log), with random targets and
slots. For every committed prefix of its output log: the backward scan and the forward scan
from the tail's hint find the same eventual checkpoint; loading it and replaying the input after
its start gives, with the log's prefix, exactly the failure-free run's results, tuple for tuple,
and the same operator state. A log trimmed to the extent's start (or to its tail, with no part
open) still recovers; one record more and the scan refuses.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.cec.checkpointer import Checkpointer, Out
from services.cec.footprints import Kind
from services.cec.intensity import NEVER, OPEN_ONLY, Intensity
from services.cec.scan import Eventual, ScanError, backward, forward
from services.operators.count_window import CountWindow
from services.operators.window import WindowAggregate
from services.spec import Aggregate

AGGS = (Aggregate("count", "count", None), Aggregate("sum", "sum", "value"), Aggregate("max", "max", "value"))


def operator(kind: tuple) -> Any:
    if kind[0] == "count":
        return CountWindow("w", "sensor", "ts", kind[1], AGGS)
    return WindowAggregate("w", "sensor", "ts", kind[1], kind[2], AGGS)


@st.composite
def runs(draw: Any) -> dict[str, Any]:
    """Skewed keys (a few hot, the rest rare: fast and slow windows), a window, a policy, batches."""
    n = draw(st.integers(1, 120))
    keys = draw(st.integers(1, 12))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    ts, recs = 0, []
    for _ in range(n):
        ts += rnd.choice((0, 1, 1, 2, 5))
        k = min(int(rnd.expovariate(0.7)), keys - 1)
        recs.append({"sensor": f"k{k}", "ts": ts, "value": float(rnd.randint(-5, 9))})
    kind = draw(st.sampled_from([("count", 1), ("count", 2), ("count", 5), ("time", 10, 10), ("time", 12, 4)]))
    q = draw(st.sampled_from([0, 1, 3, 10, NEVER]))
    u = draw(st.sampled_from([0, 2, 20, NEVER]))
    policy = Intensity(q=q, u=u, ci_ms=draw(st.integers(1, 5)), cp_ms=5)
    cuts = sorted(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=30, unique=True)))
    return {"recs": recs, "kind": kind, "policy": policy, "cuts": cuts, "chunk": draw(st.integers(1, 7))}


def batches(recs: list[dict], cuts: list[int], start: int = 0) -> list[tuple[int, list[dict]]]:
    edges = [c for c in cuts if start < c < len(recs)]
    return [(a, recs[a:b]) for a, b in zip([start, *edges], [*edges, len(recs)], strict=True) if b > a]


def drive(cp: Checkpointer, recs: list[dict], cuts: list[int], log: list[Out], start: int = 0) -> list[int]:
    """Feed ``recs`` from ``start`` in batches, the background path after each; returns the log's length
    after each batch (the committed prefixes)."""
    ends = []
    for pos, batch in batches(recs, cuts, start):
        log.extend(cp.push(pos, [(r, r["ts"]) for r in batch]))
        log.extend(cp.background(now_ms=pos))  # a clock that moves with the input
        ends.append(len(log))
    return ends


def results(log: list[Out]) -> list[Any]:
    return [payload for mark, payload in log if mark.kind is Kind.RESULT]


def comparable(op: Any) -> Any:
    """The state that decides later output (a count window's part numbers aside: the log does not use them)."""
    if isinstance(op, CountWindow):
        return {k: w.dump()[1:] for k, w in op.open.items()}
    return ({s: {k: a.__getstate__() for k, a in w.items()} for s, w in op.windows.items()}, dict(op.firsts))


def chunks(log: list[Out], size: int) -> list[list[Out]]:
    return [log[max(0, end - size) : end] for end in range(len(log), 0, -size)]


def recover(case: dict[str, Any], log: list[Out]) -> tuple[Checkpointer, Eventual]:
    cp = Checkpointer(operator(case["kind"]), case["policy"])
    ec = backward(chunks(log, case["chunk"]))
    cp.load(ec)
    return cp, ec


@settings(max_examples=300, deadline=None)
@given(runs())
def test_recovery_from_every_committed_prefix_gives_the_failure_free_output(case: dict[str, Any]) -> None:
    recs, cuts = case["recs"], case["cuts"]
    ref = Checkpointer(operator(case["kind"]), case["policy"])
    full: list[Out] = []
    ends = drive(ref, recs, cuts, full)
    for end in [0, *ends]:
        log = full[:end]
        cp, ec = recover(case, log)
        if log:
            hint = log[-1][0].xs
            assert _same(forward(log[hint:]), ec), f"forward scan from {hint} differs"
        drive(cp, recs, cuts, log, start=ec.start + 1)
        assert results(log) == results(full), f"crash after {end} records, replay after {ec.start}"
        assert comparable(cp.op) == comparable(ref.op)


def _same(a: Eventual, b: Eventual) -> bool:
    return {w: m for w, (m, _) in a.parts.items()} == {w: m for w, (m, _) in b.parts.items()} and (
        a.start,
        a.tail_pos,
        a.next_seq,
    ) == (b.start, b.tail_pos, b.next_seq)


@settings(max_examples=150, deadline=None)
@given(runs())
def test_a_log_trimmed_to_the_extent_recovers_and_one_record_more_is_refused(case: dict[str, Any]) -> None:
    recs, cuts = case["recs"], case["cuts"]
    full: list[Out] = []
    drive(Checkpointer(operator(case["kind"]), case["policy"]), recs, cuts, full)
    ec = backward(chunks(full, case["chunk"]))
    # the extent starts at the oldest open part's footprint; with none open the tail is all it needs
    extent = min((m.seq for m, _ in ec.parts.values()), default=len(full) - 1)
    assert _same(backward(chunks(full[extent:], case["chunk"]), trimmed=True), ec)
    with pytest.raises(ScanError, match="trimmed"):
        backward(chunks(full[extent + 1 :], case["chunk"]), trimmed=True)


def test_a_key_that_reopens_is_a_new_part_and_the_scan_skips_the_closed_one() -> None:
    """Window of 2 on one key: its first incarnation's G^open and R, then a second's G^open. The scan
    from the tail keeps only the open one, and stops there."""
    recs: list[dict[str, Any]] = [{"sensor": "k", "ts": t, "value": 1.0} for t in (1, 2, 3)]
    cp = Checkpointer(operator(("count", 2)), OPEN_ONLY)
    log = cp.push(0, [(r, r["ts"]) for r in recs])
    assert [(m.kind, m.win, m.n) for m, _ in log] == [
        (Kind.OPEN, (0, 0), 1),
        (Kind.RESULT, (0, 0), 0),
        (Kind.OPEN, (2, 0), 1),
    ]
    ec = backward([log])
    assert set(ec.parts) == {(2, 0)} and ec.start == 2 and ec.read == 1


def test_q_below_the_open_parts_checks_each_part_once_per_slot() -> None:
    """The extent can never be below the open parts (q >= N): a target under it checks every part in
    each period's slot, once, and stops there; a second look in the same period checks nothing."""
    recs: list[dict[str, Any]] = [{"sensor": f"k{i}", "ts": i, "value": 1.0} for i in range(4)]
    cp = Checkpointer(operator(("count", 10)), Intensity(q=1, u=NEVER, ci_ms=5, cp_ms=100))
    cp.push(0, [(r, r["ts"]) for r in recs])
    checks = cp.background(now_ms=101)
    assert [m.win for m, _ in checks] == [(0, 0), (1, 0), (2, 0), (3, 0)] and cp.checks == 4
    assert cp.background(now_ms=150) == []  # the period's slot was taken
    assert [m.win for m, _ in cp.background(now_ms=200)] == [(0, 0), (1, 0), (2, 0), (3, 0)]


def test_a_part_one_tuple_opens_and_closes_writes_its_result_alone() -> None:
    """Windows of 1 (Fig. 5's fast windows): each tuple opens and closes its part, so its CEC_OPEN would
    come right before its result in the same batch, and no scan would keep it: only the results are
    written, and the tail says no part is open."""
    recs: list[dict[str, Any]] = [{"sensor": f"k{t % 2}", "ts": t, "value": 1.0} for t in range(4)]
    cp = Checkpointer(operator(("count", 1)), OPEN_ONLY)
    log = cp.push(0, [(r, r["ts"]) for r in recs])
    assert [(m.kind, m.n, m.seq) for m, _ in log] == [(Kind.RESULT, 0, s) for s in range(4)]
    ec = backward([log])
    assert ec.parts == {} and ec.start == 3 and ec.read == 1
