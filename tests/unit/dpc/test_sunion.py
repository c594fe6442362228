"""SUnion orders inputs identically on every replica, bounds delay, and reconciles to the failure-free order."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.core.tuples import TupleType
from services.dpc.buckets import STuple
from services.dpc.sunion import SUnion

BUCKET = 10
END = 10**6  # a final boundary on every input: end of stream


@st.composite
def input_events(draw: Any, port: int) -> list[tuple]:
    """One input: tuples in stime order with dense ids, each followed (sometimes) by a boundary."""
    events: list[tuple] = []
    stime = 0
    for i in range(draw(st.integers(0, 25))):
        stime += draw(st.integers(0, 7))
        events.append(("t", port, i, stime))
        if draw(st.booleans()):
            events.append(("b", port, stime))
    events.append(("b", port, END))
    return events


def interleave(draw: Any, streams: list[list[tuple]]) -> list[tuple]:
    """One arrival order of the inputs' events, each input's own order kept."""
    idx, out = [0] * len(streams), []
    while any(i < len(s) for i, s in zip(idx, streams, strict=True)):
        live = [p for p, s in enumerate(streams) if idx[p] < len(s)]
        p = draw(st.sampled_from(live))
        out.append(streams[p][idx[p]])
        idx[p] += 1
    return out


def feed(su: SUnion, events: list[tuple], now: float, polls: list[bool]) -> list[STuple]:
    out = []
    for i, ev in enumerate(events):
        if ev[0] == "t":
            su.push(ev[1], TupleType.STABLE, ev[2], ev[3], f"r{ev[1]}.{ev[2]}", now)
        else:
            su.boundary(ev[1], ev[2])
        if polls[i % len(polls)]:
            out += su.poll(now)
    return out + su.poll(now)


def expected(streams: list[list[tuple]]) -> list[tuple]:
    return sorted((ev[3], ev[1], ev[2]) for s in streams for ev in s if ev[0] == "t")


def key(ts: list[STuple]) -> list[tuple]:
    return [(t.stime, t.port, t.id) for t in ts]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_replicas_emit_the_same_stable_sequence_in_any_arrival_order(data: Any) -> None:
    streams = [data.draw(input_events(p)) for p in range(3)]
    runs = []
    for _ in range(2):  # two replicas: different arrival orders, different poll points
        events = interleave(data.draw, streams)
        polls = data.draw(st.lists(st.booleans(), min_size=1, max_size=8))
        su = SUnion(3, BUCKET, delay_s=60)
        out = feed(su, events, now=0.0, polls=polls)
        assert all(t.type is TupleType.STABLE for t in out)
        runs.append(key(out))
    assert runs[0] == runs[1] == expected(streams)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_failure_gives_tentative_within_delay_then_reconciles_to_the_failure_free_order(data: Any) -> None:
    streams = [data.draw(input_events(p)) for p in range(3)]
    healthy, failed = interleave(data.draw, streams[:2]), streams[2]
    su = SUnion(3, BUCKET, delay_s=1.0)
    stable_before, emitted = [], []
    # Input 2 is down: the other two flow, and time passes beyond the delay at each step.
    for i, ev in enumerate(healthy):
        now = float(i)
        if ev[0] == "t":
            su.push(ev[1], TupleType.STABLE, ev[2], ev[3], None, now)
        else:
            su.boundary(ev[1], ev[2])
        out = su.poll(now)
        emitted += out
        if not su.in_failure():
            stable_before += [t for t in out if t.type is TupleType.STABLE]
        # The delay bound: nothing still pending has waited the full delay.
        assert all(now - b.first_arrival < su.delay_s for b in su.pending.values())
    # Input 2 heals and sends everything it had.
    now = float(len(healthy) + 1)
    for ev in failed:
        if ev[0] == "t":
            su.push(ev[1], TupleType.STABLE, ev[2], ev[3], None, now)
        else:
            su.boundary(ev[1], ev[2])
    after = su.poll(now)
    if su.in_failure():
        assert any(t.type is TupleType.TENTATIVE for t in emitted)
        assert all(t.type is TupleType.TENTATIVE for t in after)  # still processed on tentative state
        assert su.can_reconcile()
        final = stable_before + su.redo() + su.poll(now)
    else:
        final = stable_before + after
    assert not su.rejected
    assert all(t.type is TupleType.STABLE for t in final)
    assert key(final) == expected(streams)


def test_undo_replaces_tentative_input_with_its_corrections() -> None:
    su = SUnion(2, BUCKET, delay_s=0)
    su.push(0, TupleType.STABLE, 0, 1, "a", 0)
    su.push(1, TupleType.TENTATIVE, 5, 2, "tentative", 0)
    assert [t.type for t in su.poll(1)] == [TupleType.TENTATIVE, TupleType.TENTATIVE]
    su.undo(1)  # upstream undid its tentative tuples
    su.push(1, TupleType.STABLE, 5, 3, "corrected", 2)
    su.boundary(0, END)
    su.boundary(1, END)
    assert su.can_reconcile()
    assert [(t.type, t.rec) for t in su.redo()] == [(TupleType.STABLE, "a"), (TupleType.STABLE, "corrected")]


def test_tuple_below_its_inputs_boundary_is_rejected_not_emitted() -> None:
    su = SUnion(1, BUCKET, delay_s=60)
    su.boundary(0, 50)
    su.push(0, TupleType.STABLE, 0, 49, "late", 0)
    su.boundary(0, END)
    assert su.poll(0) == [] and [t.rec for t in su.rejected] == ["late"]


def _failing(policy: str) -> SUnion:
    """Input 1 is down; input 0's first bucket has already gone out tentatively."""
    su = SUnion(2, BUCKET, delay_s=5.0, policy=policy)
    su.push(0, TupleType.STABLE, 0, 1, "first", 0.0)
    su.boundary(0, 10)
    assert [t.type for t in su.poll(5.0)] == [TupleType.TENTATIVE]  # waited the full delay
    for i, stime in enumerate((12, 25, 31)):  # buckets 1, 2, 3 arrive at t = 6
        su.push(0, TupleType.STABLE, i + 1, stime, f"b{stime // BUCKET}", 6.0)
    return su


def test_process_policy_releases_what_the_live_inputs_have_passed_at_once_during_a_failure() -> None:
    su = _failing("process")
    su.boundary(0, 30, 6.0)  # input 0 is live; input 1 has been silent since the failure
    assert [t.rec for t in su.poll(6.0)] == ["b1", "b2"]
    assert set(su.kept) == {0, 1, 2}, "kept for the redo"
    assert su.poll(7.0) == []  # bucket 3: input 0 may still send to it
    assert [t.rec for t in su.poll(11.0)] == ["b3"]  # the newest waits at most the delay


def test_a_live_input_is_waited_for_during_a_failure_so_its_tuples_are_not_late() -> None:
    su = _failing("process")
    su.boundary(0, 20, 6.0)
    assert [t.rec for t in su.poll(6.0)] == ["b1"]
    su.push(0, TupleType.STABLE, 4, 29, "late-ish", 6.5)  # input 0 lags: bucket 2 was not released
    su.boundary(0, 30, 6.5)
    assert [t.rec for t in su.poll(6.5)] == ["b2", "late-ish"]


def test_tentative_input_is_processed_without_a_second_wait_under_process() -> None:
    """The upstream node already waited its delay before it sent tentative tuples."""
    su = SUnion(1, BUCKET, delay_s=5.0, policy="process")
    su.push(0, TupleType.TENTATIVE, 0, 1, "t0", 0.0)
    su.push(0, TupleType.TENTATIVE, 1, 12, "t1", 0.0)
    assert [(t.type, t.rec) for t in su.poll(0.0)] == [(TupleType.TENTATIVE, "t0")]
    assert [t.rec for t in su.poll(0.1)] == []  # bucket 1: newer tuples may still come
    assert [t.rec for t in su.poll(5.0)] == ["t1"]  # input silent for the delay
    held = SUnion(1, BUCKET, delay_s=5.0, policy="delay")
    held.push(0, TupleType.TENTATIVE, 0, 1, "t0", 0.0)
    held.push(0, TupleType.TENTATIVE, 1, 12, "t1", 0.0)
    assert held.poll(0.0) == []  # "delay" waits at every node
    assert [t.rec for t in held.poll(5.0)] == ["t0", "t1"]


def test_buckets_completed_at_the_heal_wait_under_delay_and_leave_stable_after_the_redo() -> None:
    su = _failing("delay")
    assert [t.rec for t in su.poll(11.0)] == ["b1", "b2", "b3"]
    su.push(1, TupleType.STABLE, 0, 5, "correction", 12.0)  # input 1 heals
    su.push(0, TupleType.STABLE, 4, 45, "b4", 12.0)
    su.boundary(0, 50, 12.0)
    su.boundary(1, 50, 12.0)
    assert su.poll(12.0) == [] and su.can_reconcile()  # bucket 4 is complete: held, not tentative
    assert [t.rec for t in su.redo()] == ["first", "correction", "b1", "b2", "b3"]
    assert [(t.type, t.rec) for t in su.poll(12.1)] == [(TupleType.STABLE, "b4")]


def test_delay_policy_holds_each_bucket_for_the_full_delay_during_a_failure() -> None:
    su = _failing("delay")
    assert su.poll(6.0) == []
    assert [t.rec for t in su.poll(11.0)] == ["b1", "b2", "b3"]


def test_frontier_is_the_stable_boundary_and_stays_below_the_failure() -> None:
    su = SUnion(2, BUCKET, delay_s=1.0)
    assert su.frontier() is None  # an input never spoke
    su.push(0, TupleType.STABLE, 0, 3, "a", 0.0)
    su.boundary(0, 27)
    su.boundary(1, 22)
    assert [t.type for t in su.poll(0.0)] == [TupleType.STABLE]
    assert su.frontier() == 20
    su.push(0, TupleType.STABLE, 1, 27, "b", 0.0)
    su.poll(2.0)  # input 1 silent past the delay: bucket 2 goes out tentatively
    assert su.in_failure() and su.frontier() == 20, "not past the first tentative bucket"
    su.boundary(0, 60)
    su.boundary(1, 60)
    assert su.frontier() == 20, "the boundaries moved, but bucket 2's correction is still to come"


def test_a_bucket_emptied_by_an_undo_is_dropped_not_emitted_as_a_failure() -> None:
    su = SUnion(2, BUCKET, delay_s=1.0)
    su.boundary(0, 5)
    su.push(1, TupleType.TENTATIVE, 0, 3, "tentative", 0.0)
    su.undo(1)  # a switch: the tentative tuple is gone, its bucket is empty
    assert su.poll(5.0) == []  # long overdue, but there is nothing to emit
    assert not su.in_failure(), "an empty bucket must not make SUnion tentative"
    su.boundary(0, 100)
    su.boundary(1, 100)
    assert su.frontier() == 100, "the node's boundary must not freeze"


def test_a_bucket_leaves_only_once_the_caller_has_processed_it() -> None:
    su = SUnion(1, BUCKET, delay_s=60)
    for i, stime in enumerate((1, 12, 25)):
        su.push(0, TupleType.STABLE, i, stime, i, 0.0)
    su.boundary(0, END)
    it = su.buckets(0.0)
    assert isinstance(it, Generator)  # a generator: closing it is what a crash in mid-bucket does
    k, label, tuples = next(it)
    assert (k, label, [t.rec for t in tuples]) == (0, TupleType.STABLE, [0])
    k, _, _ = next(it)  # bucket 0 is done; processing bucket 1 now ... and it raises
    it.close()
    assert sorted(su.pending) == [1, 2], "the bucket being processed when the node died must still be there"
    assert [t.rec for t in su.poll(0.0)] == [1, 2]


def test_kept_buckets_stay_until_their_redo_is_done() -> None:
    su = SUnion(2, BUCKET, delay_s=0)
    su.push(0, TupleType.STABLE, 0, 1, "a", 0)
    su.push(0, TupleType.STABLE, 1, 15, "b", 0)
    assert len(su.poll(1)) == 2 and su.in_failure()  # input 1 silent: both buckets tentative
    su.boundary(0, END)
    su.boundary(1, END)
    redo = su.redo_buckets()
    assert isinstance(redo, Generator)  # a generator: closing it is what a crash in mid-redo does
    next(redo)
    redo.close()  # the redo died halfway
    assert sorted(su.kept) == [0, 1] and su.can_reconcile()
    assert [t.rec for t in su.redo()] == ["a", "b"] and not su.in_failure()


def test_a_restored_sunion_counts_its_waits_from_the_restore_not_from_old_clock_readings() -> None:
    before = SUnion(2, BUCKET, delay_s=2.0)
    before.boundary(1, 0, now=10_000.0)
    before.push(0, TupleType.STABLE, 0, 5, "x", 10_000.0)
    state = before.state()
    # The image holds tuple times only: no reading of the old host's monotonic clock.
    assert not any(isinstance(v, float) for v in vars(state).values())
    after = SUnion(2, BUCKET, delay_s=2.0)
    after.restore(state, now=3.0)  # another host, whose monotonic clock is far behind
    assert after.poll(4.0) == []  # input 1 counts as live, and the bucket waits, from the restore
    assert [t.type for t in after.poll(5.5)] == [TupleType.TENTATIVE]


def test_settled_kept_buckets_are_redone_and_the_rest_stay_kept_for_the_next_reconciliation() -> None:
    su = SUnion(2, BUCKET, delay_s=1.0)
    su.boundary(0, 10)
    su.boundary(1, 10)
    su.push(0, TupleType.STABLE, 0, 12, "a1", 0.0)
    su.poll(2.0)  # input 1 silent: bucket 1 goes out tentatively and is kept
    su.push(1, TupleType.STABLE, 0, 15, "b1", 2.5)  # it heals: bucket 1's correction
    su.boundary(0, 20)
    su.boundary(1, 20)
    su.push(0, TupleType.STABLE, 1, 25, "a2", 2.5)
    su.push(1, TupleType.TENTATIVE, 1, 26, "t2", 2.5)  # and fails again (tentative input)
    assert [t.rec for t in su.poll(3.6)] == ["a2", "t2"]  # overdue: tentative
    assert sorted(su.kept) == [1, 2] and su.settled() == [1] and not su.can_reconcile()
    assert not su.ready_to_reconcile(3.6), "more may settle: wait a little"
    assert su.ready_to_reconcile(4.7), "nothing more settled for the delay: reconcile what is"
    assert [t.rec for t in su.redo()] == ["a1", "b1"]
    assert sorted(su.kept) == [2] and su.in_failure()
    assert su.frontier() == 20, "everything before the unsettled bucket is stable now"
    assert [(t.type, t.rec) for _, _, ts in su.rerun_buckets() for t in ts] == [
        (TupleType.TENTATIVE, "a2"),
        (TupleType.TENTATIVE, "t2"),
    ]
    assert sorted(su.kept) == [2], "rerun buckets stay kept"


def test_a_long_failure_keeps_at_most_max_kept_tuples_and_reconciles_once_the_range_settles() -> None:
    su = SUnion(2, BUCKET, delay_s=1.0, max_kept=5)
    su.boundary(0, 10)
    su.boundary(1, 10)
    labels = []
    for i in range(100):  # input 1 silent for 100 buckets: every bucket of input 0 goes out tentatively
        su.push(0, TupleType.STABLE, i, 10 + i * BUCKET, f"a{i}", 2.0 + i)
        su.boundary(0, 20 + i * BUCKET)
        labels += [t.type for t in su.poll(2.0 + i + 1.5)]
        assert su.kept_tuples <= 5, "the failure's tuples are bounded by max_kept"
    assert labels == [TupleType.TENTATIVE] * 100, "a spilled failure is still a failure: tentative to the end"
    assert su.spilled and su.in_failure() and su.peak_kept == 5
    assert su.frontier() == 10, "nothing after the failure's start is stable"
    su.push(1, TupleType.STABLE, 0, 500, "late", 200.0)  # input 1's correction: dropped, it is in the log
    assert su.kept_tuples == 0 and not su.pending
    su.boundary(1, 600)
    assert su.settled_upto() == (59, False) and not su.ready_to_reconcile(200.0)
    assert su.ready_to_reconcile(201.5), "the settled part is reconciled once no more settles for the delay"
    su.boundary(1, 5000)
    assert su.settled_upto() == (100, True) and su.can_reconcile()


def test_rewind_returns_to_the_failure_start_with_kept_buckets_pending_and_tentative_input_dropped() -> None:
    su = SUnion(2, BUCKET, delay_s=1.0, max_kept=1)
    su.boundary(0, 10)
    su.boundary(1, 10)
    su.push(0, TupleType.STABLE, 0, 12, "a0", 0.0)
    su.poll(2.0)  # bucket 1 tentative, kept
    su.push(0, TupleType.STABLE, 1, 25, "a1", 2.0)
    su.push(1, TupleType.TENTATIVE, 0, 26, "t0", 2.0)
    at_start = su.state()  # a failure begins again here (after a partial reconciliation, say)
    su.poll(4.0)
    assert su.spilled
    su.rewind(at_start, now=10.0)
    assert not su.in_failure() and su.kept_tuples == 0
    assert {k: [t.rec for t in b.tuples] for k, b in su.pending.items()} == {1: ["a0"], 2: ["a1"]}
    su.push(1, TupleType.STABLE, 0, 15, "b0", 10.0)  # input 1 read again from the log: stable now
    su.boundary(0, 30)
    su.boundary(1, 30)
    assert [(t.type, t.rec) for t in su.poll(10.0)] == [
        (TupleType.STABLE, "a0"),
        (TupleType.STABLE, "b0"),
        (TupleType.STABLE, "a1"),
    ]


def test_a_bucket_refilled_by_corrections_after_an_undo_keeps_the_wait_it_had_served() -> None:
    su = SUnion(2, BUCKET, delay_s=1.0, policy="delay")
    su.push(0, TupleType.STABLE, 0, 1, "first", 0.0)
    su.boundary(0, 10)
    assert [t.type for t in su.poll(1.0)] == [TupleType.TENTATIVE]  # input 1 is down: in failure
    su.push(1, TupleType.TENTATIVE, 0, 25, "tentative", 2.0)
    assert su.poll(2.5) == []  # held: due 1 s after 2.0
    su.undo(1)  # input 1's upstream reconciles: its tentative tuple goes, the bucket is empty
    assert su.poll(2.6) == []
    su.push(1, TupleType.STABLE, 0, 25, "corrected", 2.9)  # the correction of that same data
    assert [(t.type, t.rec) for t in su.poll(3.05)] == [(TupleType.TENTATIVE, "corrected")], (
        "the data has waited here since 2.0: due at 3.0, not 1 s after its correction came"
    )


# -- one input, in its own order ---------------------------------------------------------------


def test_one_input_in_order_goes_out_at_once_before_any_boundary() -> None:
    su = SUnion(1, BUCKET, delay_s=60, in_order=True)
    su.push(0, TupleType.STABLE, 0, 3, "a", 0.0)
    assert [(t.type, t.rec) for t in su.poll(0.0)] == [(TupleType.STABLE, "a")]
    su.push(0, TupleType.STABLE, 1, 5, "b", 0.0)  # the same bucket, after it went out
    assert [(t.type, t.rec) for t in su.poll(0.0)] == [(TupleType.STABLE, "b")]
    assert not su.in_failure() and su.frontier() is None, "no boundary yet: nothing promised downstream"
    su.boundary(0, 20)
    assert su.frontier() == 20


@st.composite
def unordered_input(draw: Any) -> list[tuple[int, int]]:
    """(id, stime) of one input's stable tuples: times jump back and forth, never below the boundary
    the input had sent before them (boundaries are the ``None`` entries)."""
    out: list[Any] = []
    bound, newest = 0, 0
    for i in range(draw(st.integers(1, 30))):
        stime = draw(st.integers(bound, bound + 40))
        newest = max(newest, stime)
        out.append((i, stime))
        if draw(st.booleans()):
            bound = draw(st.integers(bound, newest))
            out.append((None, bound))
    return out


def _stable_run(su: SUnion, events: list[tuple[Any, int]], polls: list[bool], now: float = 0.0) -> list[int]:
    got: list[int] = []
    for n, (tid, stime) in enumerate(events):
        if tid is None:
            su.boundary(0, stime, now)
        else:
            su.push(0, TupleType.STABLE, tid, stime, tid, now)
        if polls[n % len(polls)]:
            got += [t.id for t in su.poll(now) if t.type is TupleType.STABLE]
    return got + [t.id for t in su.poll(now) if t.type is TupleType.STABLE]


@settings(max_examples=200, deadline=None)
@given(unordered_input(), st.lists(st.booleans(), min_size=1, max_size=6), st.integers(0, 30))
def test_one_input_keeps_its_order_failure_free_and_through_a_failure_and_its_redo(
    events: list[tuple[Any, int]], polls: list[bool], cut: int
) -> None:
    """Every replica reads the input in the same order, so that order is the serialization: failure-free
    at once in any poll pattern, and through a tentative stretch, its UNDO and the redo of the kept
    buckets, as the stable sequence a restart or the other replica gives."""
    ids = [tid for tid, _ in events if tid is not None]
    calm = SUnion(1, BUCKET, delay_s=60, in_order=True)
    assert _stable_run(calm, events + [(None, END)], polls) == ids, "stable at once, in arrival order"

    # A replica whose input goes tentative after ``cut`` events, then is corrected by the same stable tuples.
    su = SUnion(1, BUCKET, delay_s=0, in_order=True)
    before, after = events[:cut], events[cut:]
    got = _stable_run(su, before, polls)
    last = max((tid for tid, _ in before if tid is not None), default=-1)
    newest = max((s for _, s in before), default=0)
    for j in range(3):  # tentative tuples past the last stable one: they go out, the node is in a failure
        su.push(0, TupleType.TENTATIVE, last + 1 + j, newest + 7 * j, "t", 1.0)
    tentative = su.poll(1.0)
    assert tentative and all(t.type is TupleType.TENTATIVE for t in tentative) and su.in_failure()
    su.undo(0)
    for tid, stime in after:
        if tid is None:
            su.boundary(0, stime, 2.0)
        else:
            su.push(0, TupleType.STABLE, tid, stime, tid, 2.0)
        assert all(t.type is TupleType.TENTATIVE for t in su.poll(2.0)), "in a failure until reconciled"
    su.boundary(0, END, 2.0)
    su.poll(2.0)
    assert su.can_reconcile()
    got += [t.id for t in su.redo()]
    got += [t.id for t in su.poll(2.0)]
    assert got == ids, "the redo serializes as the failure-free pass did"


def test_a_bucket_emitted_under_its_label_keeps_every_field_of_its_tuples() -> None:
    """Emitting a bucket tentative, and redoing it, copies its tuples under the new label: the input
    position a scheme asked for (``STuple.offset``) and the t_max go with them."""
    su = SUnion(1, BUCKET, delay_s=5.0, policy="process")
    su.push(0, TupleType.TENTATIVE, 0, 1, "t0", 0.0, tmax=7, offset=41)
    su.push(0, TupleType.TENTATIVE, 1, 12, "t1", 0.0, tmax=7, offset=42)  # bucket 0 is passed
    (t,) = su.poll(0.0)
    assert (t.type, t.port, t.id, t.stime, t.rec, t.tmax, t.offset) == (TupleType.TENTATIVE, 0, 0, 1, "t0", 7, 41)
    assert STuple(TupleType.TENTATIVE, 0, 0, 1, "t0", 7, 41).labeled(TupleType.STABLE) == STuple(
        TupleType.STABLE, 0, 0, 1, "t0", 7, 41
    )


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_early_release_keeps_every_replicas_sequence_and_needs_only_the_boundaries(data: Any) -> None:
    """With ``early``, what every input's boundary has passed goes out before its bucket is whole: the
    stable sequence is still the same in any arrival order and at any poll points, and a tuple goes
    out as soon as every input's boundary is past its stime, not its bucket's end."""
    streams = [data.draw(input_events(p)) for p in range(3)]
    runs = []
    for _ in range(2):
        events = interleave(data.draw, streams)
        polls = data.draw(st.lists(st.booleans(), min_size=1, max_size=8))
        su = SUnion(3, BUCKET, delay_s=60, early=True)
        out: list[STuple] = []
        for i, ev in enumerate(events):
            if ev[0] == "t":
                su.push(ev[1], TupleType.STABLE, ev[2], ev[3], f"r{ev[1]}.{ev[2]}", 0.0)
            else:
                su.boundary(ev[1], ev[2])
            if polls[i % len(polls)]:
                out += su.poll(0.0)
                low = min((b for b in su.boundaries if b is not None), default=None)
                if low is not None and None not in su.boundaries:  # nothing below every boundary waits
                    assert not [t for b in su.pending.values() for t in b.tuples if t.stime < low]
        out += su.poll(0.0)
        runs.append(key(out))
    assert runs[0] == runs[1] == expected(streams)


def test_early_release_goes_out_before_the_bucket_ends_but_never_past_a_lagging_input() -> None:
    su = SUnion(2, 100, delay_s=60, early=True)
    su.push(0, TupleType.STABLE, 0, 10, "a0", 0.0)
    su.push(1, TupleType.STABLE, 0, 12, "b0", 0.0)
    su.boundary(0, 30)
    assert su.poll(0.0) == []  # input 1 promised nothing yet
    su.boundary(1, 11)
    assert key(su.poll(0.0)) == [(10, 0, 0)]  # below both boundaries; b0 at 12 is not
    su.boundary(1, 40)
    assert key(su.poll(0.0)) == [(12, 1, 0)]
    su.push(0, TupleType.STABLE, 1, 35, "a1", 0.0)
    assert su.poll(0.0) == []  # not below input 0's boundary, 30
    su.boundary(0, 100)
    assert key(su.poll(0.0)) == [(35, 0, 1)]


def test_a_precise_frontier_is_the_first_tuple_not_out_or_every_boundary_not_a_bucket_start() -> None:
    su = SUnion(2, 100, delay_s=60, early=True, precise=True)
    su.push(0, TupleType.STABLE, 0, 110, "a0", 0.0)
    su.push(1, TupleType.STABLE, 0, 150, "b0", 0.0)
    su.boundary(0, 160)
    su.boundary(1, 140)
    assert key(su.poll(0.0)) == [(110, 0, 0)]
    assert su.frontier() == 140  # b0 at 150 waits for input 1 past it; everything below 140 is out
    su.boundary(1, 170)
    assert key(su.poll(0.0)) == [(150, 1, 0)] and su.frontier() == 160
    late = SUnion(2, 100, delay_s=60, early=True)
    late.boundary(0, 160)
    late.boundary(1, 170)
    assert late.frontier() == 100  # not precise: bucket starts
