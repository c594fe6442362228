"""PartitionView applies the DPC tuple contract: duplicates dropped by id, UNDO voids tentatives, stable survives."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.client.partition import PartitionView, ViewEvent
from services.client.workload import readings
from services.core.tuples import TupleType

S, T, U, R, B = TupleType.STABLE, TupleType.TENTATIVE, TupleType.UNDO, TupleType.REC_DONE, TupleType.BOUNDARY


def stable(i: int) -> tuple:
    return (S, i, 10 * i, {"i": i})


def run(view: PartitionView, msgs: list[tuple]) -> list[ViewEvent]:
    out: list[ViewEvent] = []
    for ttype, tid, stime, payload in msgs:
        view.apply(ttype, tid, stime, payload, out)
    return out


def replay(events: list[ViewEvent]) -> tuple[list[Any], list[Any]]:
    """What a client that only sees the events ends up with: (stable, tentative) records."""
    st_, tent = [], []
    for e in events:
        if e.kind == "stable":
            st_.append(e.record)
        elif e.kind == "tentative":
            tent.append(e)
        elif e.kind == "undo":
            tent = [t for t in tent if t.replica != e.replica or t.id <= e.id]
    return st_, [t.record for t in tent]


@st.composite
def arrivals(draw: Any) -> tuple[int, list[tuple]]:
    """A stable sequence 0..n-1 interleaved with tentative runs (each then UNDO(L), then the
    stable corrections), duplicate stable tuples, boundaries and REC_DONEs."""
    n = draw(st.integers(0, 40))
    msgs: list[tuple] = []
    nxt = 0  # next stable id to send
    while nxt < n:
        kind = draw(st.sampled_from(["stable", "stable", "run", "dup", "boundary"]))
        if kind == "stable":
            msgs.append(stable(nxt))
            nxt += 1
        elif kind == "dup" and nxt > 0:
            msgs.append(stable(draw(st.integers(0, nxt - 1))))
        elif kind == "boundary":
            msgs.append((B, nxt - 1, 10 * nxt, None))
        elif kind == "run":
            last = nxt - 1
            for k in range(draw(st.integers(1, 5))):
                msgs.append((T, last + 1 + k, 10 * (last + 1 + k), {"t": last + 1 + k}))
                if nxt > 0 and draw(st.booleans()):
                    msgs.append(stable(draw(st.integers(0, nxt - 1))))
            msgs.append((U, last, 10 * last, None))
            fix = draw(st.integers(0, n - nxt))
            for _ in range(fix):  # the corrections
                msgs.append(stable(nxt))
                nxt += 1
            if draw(st.booleans()):
                msgs.append((R, nxt - 1, 10 * nxt, None))
    return n, msgs


@settings(max_examples=300, deadline=None)
@given(arrivals())
def test_any_interleaving_yields_exactly_the_stable_sequence(case: tuple[int, list[tuple]]) -> None:
    n, msgs = case
    view = PartitionView(0)
    events = run(view, msgs)
    want = [{"i": i} for i in range(n)]
    assert view.stable == want
    assert view.tentative == []
    assert view.last_stable == n - 1 and view.gaps == 0
    assert [e.id for e in events if e.kind == "stable"] == list(range(n))
    assert replay(events) == (want, [])


def test_undo_voids_tentatives_and_corrections_follow() -> None:
    view = PartitionView(3)
    events = run(view, [stable(0), stable(1), (T, 2, 20, "t2"), (T, 3, 30, "t3")])
    assert [e.kind for e in events] == ["stable", "stable", "tentative", "tentative"]
    assert [e.record for e in view.tentative] == ["t2", "t3"]
    events = run(view, [(U, 1, 10, None), stable(2), (R, 2, 20, None), stable(3)])
    assert [(e.kind, e.id) for e in events] == [("undo", 1), ("stable", 2), ("rec_done", 2), ("stable", 3)]
    assert all(e.partition == 3 for e in events)
    assert view.stable == [{"i": i} for i in range(4)] and view.tentative == [] and view.undone == 2
    assert view.rec_done == 2


def test_duplicates_and_stale_control_tuples_after_a_switch_are_dropped() -> None:
    view = PartitionView(0)
    run(view, [stable(i) for i in range(5)] + [(T, 5, 50, "t5")])
    out: list[ViewEvent] = []
    view.switch(1, out)  # the held tentative will be corrected in the other replica
    assert [(e.kind, e.id, e.replica) for e in out] == [("undo", 4, 0)], "replica 0's tentative tuples are void"
    assert view.tentative == [] and view.replica == 1
    # The new replica's log right after stable 3: its own old reconciliation and duplicates.
    events = run(view, [(U, 2, 20, None), stable(3), stable(4), (R, 3, 30, None), (T, 4, 40, "old"), stable(5)])
    assert [(e.kind, e.id) for e in events] == [("stable", 5)]
    assert events[0].replica == 1
    assert view.duplicates == 2 and view.stable == [{"i": i} for i in range(6)]


def test_stable_without_undo_voids_the_stale_tentative_suffix() -> None:
    view = PartitionView(0)
    events = run(view, [stable(0), (T, 1, 10, "t1"), stable(1)])
    assert [(e.kind, e.id) for e in events] == [("stable", 0), ("tentative", 1), ("undo", 0), ("stable", 1)]
    assert replay(events) == ([{"i": 0}, {"i": 1}], [])


def test_restarted_tentative_run_voids_the_overlap() -> None:
    view = PartitionView(0)
    events = run(view, [stable(0), (T, 1, 10, "a1"), (T, 2, 20, "a2"), (T, 2, 20, "b2")])
    assert [(e.kind, e.id) for e in events][-2:] == [("undo", 1), ("tentative", 2)]
    assert [e.record for e in view.tentative] == ["a1", "b2"]
    assert replay(events) == ([{"i": 0}], ["a1", "b2"])


def test_boundaries_are_tracked_without_events() -> None:
    view = PartitionView(0)
    events = run(view, [(B, -1, 5, None), stable(0), (B, 0, 40, None), (B, 0, 30, None), stable(1)])
    assert [e.kind for e in events] == ["stable", "stable"]
    assert view.boundary == 40


def test_a_gap_in_stable_ids_stops_the_view_until_the_missing_ids_are_read_again() -> None:
    view = PartitionView(0)
    events = run(view, [stable(0), stable(3), stable(4), (T, 5, 50, "t")])
    assert [(e.kind, e.id) for e in events] == [("stable", 0)], "ids 1 and 2 must not be skipped"
    assert view.gap == 1 and view.gaps == 1 and view.last_stable == 0
    view.switch(1, [])  # the view reads them again (from another replica)
    events = run(view, [stable(1), stable(2), stable(3)])
    assert [e.id for e in events] == [1, 2, 3] and view.gap is None


def test_decode_only_kept_data_tuples_and_bad_payloads_are_skipped() -> None:
    calls: list[Any] = []

    def decode(b: Any) -> Any:
        calls.append(b)
        if b == "bad":
            raise ValueError("not avro")
        return {"v": b}

    view = PartitionView(0, decode)
    run(
        view,
        [stable(0), stable(0), (B, 0, 1, None), (U, 0, 0, None), (R, 0, 0, None), (S, 1, 1, "bad"), (S, 1, 1, "x")],
    )
    assert len(calls) == 3 and view.bad == 1
    assert view.stable == [{"v": {"i": 0}}, {"v": "x"}]


def test_without_tentative_tracking_only_stable_and_rec_done() -> None:
    view = PartitionView(0, tentative=False, keep_stable=False)
    events = run(view, [stable(0), (T, 1, 10, "t"), (U, 0, 0, None), stable(1), (R, 1, 10, None)])
    assert [e.kind for e in events] == ["stable", "stable", "rec_done"]
    assert view.stable == [] and view.last_stable == 1


def test_readings_wall_clock_mode_tracks_now_and_default_stays_deterministic() -> None:
    import time

    assert list(readings(5, seed=3)) == list(readings(5, seed=3))
    before = int(time.time() * 1000)
    recs = list(readings(50, wall_clock=True))
    after = int(time.time() * 1000)
    ts = [r["ts"] for r in recs]
    assert ts == sorted(ts) and before <= ts[0] and ts[-1] <= after
    assert [r["sensor"] for r in recs] == [r["sensor"] for r in readings(50)]


def test_a_view_ignores_what_a_replaced_writer_writes_after_its_successor_appeared() -> None:
    """Epoch 3 writes stable 0..2 and a tentative 3; epoch 5 takes over (EPOCH, UNDO(2)) and writes
    stable 3..4. The paused epoch-3 copy, resumed, writes a conflicting stable 5, a tentative 6 and
    an UNDO: the client sees the live writer's stream only."""
    from services.core.tuples import EPOCH, Headers, header_writer

    old, new = header_writer(0, epoch=3), header_writer(0, epoch=5)
    log: list[tuple[Headers, dict[str, int] | None]] = [(old(S, i, 10 * i), {"i": i}) for i in range(3)]
    log += [(old(T, 3, 30), {"t": 3})]
    log += [(new(EPOCH, -1, 0), None), (new(U, 2, 0), None), (new(S, 3, 30), {"i": 3}), (new(S, 4, 40), {"i": 4})]
    log += [(old(S, 5, 50), {"zombie": 5}), (old(T, 6, 60), {"zombie": 6}), (old(U, 4, 0), None)]
    log += [(new(S, 5, 50), {"i": 5})]
    view = PartitionView()
    out: list[ViewEvent] = []
    for headers, payload in log:
        view.take(headers, payload, out)
    assert view.stable == [{"i": i} for i in range(6)]
    assert view.tentative == [] and view.fenced == 3
    assert [e.kind for e in out] == ["stable"] * 3 + ["tentative", "undo"] + ["stable"] * 3


def tentative(view: PartitionView, replica: int, ids: range, first: int, fresh: bool = False) -> list[ViewEvent]:
    """Tentative tuples of ``replica`` with t_max (and stime) ``first``, ``first + 1``, ..."""
    out: list[ViewEvent] = []
    for k, i in enumerate(ids):
        view.apply(T, i, first + k, f"r{replica}@{first + k}", out, replica, -1, first + k, fresh)
    return out


def test_a_switch_to_a_replica_in_failure_keeps_the_tentative_tuples_and_takes_only_newer_ones() -> None:
    view = PartitionView(0)
    run(view, [stable(i) for i in range(3)])
    tentative(view, 0, range(3, 6), 100)
    out: list[ViewEvent] = []
    view.switch(1, out, keep=True)  # rule 3: replica 1 is in UPSTREAM_FAILURE too
    assert out == [] and len(view.tentative) == 3
    got = tentative(view, 1, range(3, 8), 100)  # it processed the same input: 100..102 are held already
    assert [e.record for e in got] == ["r1@103", "r1@104"]
    assert view.repeats == 3
    assert [e.record for e in view.tentative] == ["r0@100", "r0@101", "r0@102", "r1@103", "r1@104"]
    # Its reconciliation voids all of them, whichever replica they came from.
    events = run(view, [(U, 2, 0, None), stable(3)])
    assert replay(got + events)[1] == [] and view.tentative == []


def test_corrections_from_a_reconciling_replica_and_new_tuples_from_a_fresh_one() -> None:
    view = PartitionView(0)
    events = run(view, [stable(i) for i in range(3)])
    events += tentative(view, 0, range(3, 6), 100)
    view.start_fresh(1, view.gate)  # rule 4: replica 0 reconciles, replica 1 still in UPSTREAM_FAILURE
    out: list[ViewEvent] = []
    view.apply(U, 2, 0, None, out, 0)  # replica 0's UNDO voids its own tentative tuples only
    events += out
    events += tentative(view, 1, range(3, 9), 100, fresh=True)  # new: 103..105
    events += tentative(view, 0, range(3, 4), 200)  # the reconciling replica's are not taken meanwhile
    events += run(view, [stable(3), stable(4)])  # its corrections
    assert [e.record for e in view.tentative] == ["r1@103", "r1@104", "r1@105"]
    assert replay(events) == ([{"i": i} for i in range(5)], ["r1@103", "r1@104", "r1@105"])
    out = []
    view.apply(R, 4, 0, None, out, 0)  # corrected: replica 0's stable stream replaces the fresh ones
    events += out
    assert view.fresh is None and view.tentative == []
    assert replay(events) == ([{"i": i} for i in range(5)], [])


def test_a_fresh_replica_started_after_the_undo_gives_only_tuples_past_those_corrected() -> None:
    view = PartitionView(0)
    events = run(view, [stable(i) for i in range(3)])
    events += tentative(view, 0, range(3, 6), 100)
    out: list[ViewEvent] = []
    view.apply(U, 2, 0, None, out, 0)  # replica 0's UNDO arrives before its STABILIZATION heartbeat
    events += out
    view.start_fresh(1, view.gate)  # rule 4 then: replica 1 still in UPSTREAM_FAILURE
    got = tentative(view, 1, range(3, 9), 100, fresh=True)  # 100..102 are in replica 0's corrections
    assert [e.record for e in got] == ["r1@103", "r1@104", "r1@105"]
    events += got + run(view, [stable(3), stable(4)])
    out = []
    view.apply(R, 4, 0, None, out, 0)
    assert replay(events + out) == ([{"i": i} for i in range(5)], [])


def test_corrections_from_a_partner_that_began_to_reconcile_while_the_followed_replica_goes_on_fresh() -> None:
    from services.core.tuples import EpochGate

    view = PartitionView(0)
    events = run(view, [stable(i) for i in range(3)])
    events += tentative(view, 0, range(3, 6), 100)
    view.correct(1, EpochGate(), view.gate)  # replica 1 reconciles; replica 0 goes on where it is read
    events += tentative(view, 0, range(6, 8), 103, fresh=True)  # its next ones, each taken
    out: list[ViewEvent] = []
    view.apply(U, 2, 0, None, out, 1)  # replica 1's UNDO: it held none of these
    events += out + run(view, [stable(3), stable(4)])
    assert [e.record for e in view.tentative] == ["r0@100", "r0@101", "r0@102", "r0@103", "r0@104"]
    out = []
    view.apply(R, 4, 0, None, out, 1)  # corrected: replica 1's stable stream replaces them
    assert view.fresh is None and view.replica == 1 and view.tentative == []
    assert replay(events + out) == ([{"i": i} for i in range(5)], [])


def test_a_switch_to_a_stable_replica_that_turns_tentative_first_gives_no_tentative_result_twice() -> None:
    """The followed replica's delay ran out just before its partner's: the view moves to the partner
    while it is STABLE, and the partner's first tuples are tentative results the view holds already."""
    from services.dpc.switching import Move

    view = PartitionView(0)
    events = run(view, [stable(i) for i in range(3)])
    events += tentative(view, 0, range(3, 6), 100)
    out: list[ViewEvent] = []
    view.moved(1, Move.STABLE, out)
    assert out == [] and len(view.tentative) == 3  # held until replica 1's tuples replace them
    got = tentative(view, 1, range(3, 8), 100)
    assert [e.record for e in got] == ["r1@103", "r1@104"] and view.repeats == 3
    events += got + run(view, [(U, 2, 0, None), stable(3), stable(4)])  # replica 1 reconciles
    assert replay(events) == ([{"i": i} for i in range(5)], [])
    # Its stable tuples replace what is held without an UNDO, as before.
    view = PartitionView(0)
    events = run(view, [stable(i) for i in range(3)]) + tentative(view, 0, range(3, 6), 100)
    view.moved(1, Move.STABLE, events)
    events += run(view, [stable(3)])
    assert replay(events) == ([{"i": i} for i in range(4)], []) and view.tentative == []
    # A GAP move reads the stream again: nothing is held.
    view = PartitionView(0)
    run(view, [stable(i) for i in range(3)])
    tentative(view, 0, range(3, 6), 100)
    out = []
    view.moved(1, Move.GAP, out)
    assert [e.kind for e in out] == ["undo"] and view.tentative == []
