"""The DPC scheme in a node replica, without Kafka: determinism of stable ids, rejected tuples, stale input.

Two replicas get the same messages cut into different polls; DPC promises they write the
same stable tuples under the same ids.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from services.control.messages import ControlKind
from services.control.states import NodeState
from services.core.tuples import REC_DONE, UNDO, read_headers
from services.node.metrics import reason_label
from services.spec import parse_spec
from tests.unit.dpc.fake_node import BOUNDARY, CHAIN, STABLE, TENTATIVE, FakeMessage, FakeNode, source_messages

# A window's results merged, inside one node, with another stream: by a union and by a join.
MERGE_TEXT = """\
name: merge
defaults: {replicas: 2}
streams:
  a: {schema: reading, key: sensor}
  c: {schema: window_stat, key: key}
  w: {schema: window_stat, key: key}
  merged: {schema: window_stat, key: key}
  pairs: {schema: joined, key: key}
operators:
  tumble: {type: window, input: a, output: w, key: sensor, size: 100, aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  mix: {type: union, inputs: [w, c], output: merged}
  near: {type: join, left: w, right: c, output: pairs, key: key, time: window_end, within: 150,
         fields: {key: left.key, ts: "max(left.window_end, right.window_end)", left_value: left.sum, right_value: right.sum}}
nodes:
  n: {operators: [tumble, mix, near]}
"""
MERGE_AFTER_WINDOW = parse_spec(MERGE_TEXT)

DIVIDE = parse_spec(
    """\
name: div
defaults: {replicas: 2}
streams:
  a: {schema: reading, key: sensor}
  inv: {schema: reading, key: sensor}
  stats: {schema: window_stat, key: key}
operators:
  invert: {type: map, input: a, output: inv, fields: {sensor: sensor, ts: ts, value: "100 / value", seq: seq}}
  nonneg: {type: map, input: inv, output: pos, fields: {sensor: sensor, ts: ts, value: "None if value < 0 else value", seq: seq}}
  per: {type: window, input: pos, output: stats, key: sensor, size: 50, aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [invert, nonneg, per]}
""".replace("  stats:", "  pos: {schema: reading, key: sensor}\n  stats:")
)


def readings(n: int, step: int, seed: int, zero_every: int = 0) -> list[dict]:
    out = []
    for i in range(n):
        value = float((i * 7 + seed) % 11 - 3)
        if zero_every and i % zero_every == 0:
            value = 0.0
        out.append({"sensor": f"s{(i + seed) % 3}", "ts": 5 + i * step, "value": value, "seq": i})
    return out


def stats(n: int, step: int) -> list[dict]:
    return [
        {
            "key": f"s{i % 3}",
            "window_start": 100 * (i // 2),
            "window_end": 5 + i * step,
            "count": 1,
            "sum": float(i),
            "avg": float(i),
            "min": float(i),
            "max": float(i),
        }
        for i in range(n)
    ]


def interleave(xs: list[FakeMessage], ys: list[FakeMessage]) -> list[FakeMessage]:
    """Both sources' messages merged by the time in their headers, as they would arrive."""

    def t(m: FakeMessage) -> int:
        return read_headers(m.headers())[2]

    return sorted(xs + ys, key=t)


def run(node: FakeNode, msgs: list[FakeMessage], cuts: list[int], now: float = 0.0) -> None:
    """Feed ``msgs`` in polls of the sizes in ``cuts`` (cycled), then idle polls."""
    i, c = 0, 0
    while i < len(msgs):
        size = cuts[c % len(cuts)]
        node.step(msgs[i : i + size], now)
        i, c = i + size, c + 1
    node.step([], now)


def merge_inputs(node: FakeNode) -> list[FakeMessage]:
    a = source_messages(node, "a", readings(60, 17, 1), boundary_every=3)
    c = source_messages(node, "c", stats(40, 23), boundary_every=2, time="window_end")
    end = [node.message("a", BOUNDARY, 59, 10**6), node.message("c", BOUNDARY, 39, 10**6)]
    return interleave(a, c) + end


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 80), min_size=1, max_size=6))
@example([1000])  # everything in one poll
def test_a_window_merged_inside_a_node_gives_the_same_stable_ids_however_the_input_was_polled(cuts: list[int]) -> None:
    one_by_one, other = FakeNode(MERGE_AFTER_WINDOW, "n", replica=0), FakeNode(MERGE_AFTER_WINDOW, "n", replica=1)
    run(one_by_one, merge_inputs(one_by_one), [1])
    run(other, merge_inputs(other), cuts)
    for stream in ("merged", "pairs"):
        want = one_by_one.stable(stream)
        assert want, f"no {stream} output"
        assert other.stable(stream) == want, f"{stream}: the replicas numbered their stable tuples differently"
    times = [stime for t, _, stime, _ in one_by_one.written("merged") if t is STABLE]
    assert times == sorted(times), "a node's output must not go back in time"


def test_redo_after_a_failure_numbers_the_stable_tuples_as_the_failure_free_run_does() -> None:
    healthy, failing = FakeNode(MERGE_AFTER_WINDOW, "n"), FakeNode(MERGE_AFTER_WINDOW, "n", replica=1)
    run(healthy, merge_inputs(healthy), [4])
    msgs = merge_inputs(failing)
    # Input c goes silent for a while: hold back its messages from the middle on.
    cut = len(msgs) // 3
    held = [m for m in msgs[cut:] if m.topic() == failing.inputs.ports[1].topic]
    flowing = [m for m in msgs[cut:] if m.topic() != failing.inputs.ports[1].topic]
    run(failing, msgs[:cut], [3], now=0.0)
    delay = failing.plan.delay_s
    run(failing, flowing, [3], now=delay + 1)  # past the node's delay: tentative results
    assert failing.stats.tentative > 0
    run(failing, held, [5], now=delay + 2)  # c heals: its stable tuples come, the node reconciles
    assert failing.stats.reconciliations == 1
    for stream in ("merged", "pairs"):
        assert failing.stable(stream) == healthy.stable(stream), f"{stream}: redo numbered differently"


def test_a_tuple_an_operator_cannot_process_is_deadlettered_on_every_replica_and_the_node_goes_on() -> None:
    recs = readings(40, 10, 2, zero_every=7)  # 100 / 0 for every 7th; negative results are None, not a double
    replicas = [FakeNode(DIVIDE, "n", replica=r) for r in range(2)]
    for node, cuts in zip(replicas, ([1], [5, 9, 2]), strict=True):
        msgs = source_messages(node, "a", recs, boundary_every=4) + [node.message("a", BOUNDARY, 39, 10**6)]
        run(node, msgs, cuts)
    first, second = replicas
    assert first.stable("stats") == second.stable("stats")
    ids = [tid for tid, _ in first.stable("stats")]
    assert ids == list(range(len(ids))) and ids, "stable ids stay dense around the rejected tuples"
    want = sum(1 for r in recs if r["value"] != 0 and 100 / r["value"] > 0)
    assert sum(rec["count"] for _, rec in first.stable("stats")) == want
    for node in replicas:
        reasons = [h["ht.error"].decode() for h in node.deadletters()]
        assert sum("ZeroDivisionError" in r for r in reasons) == sum(1 for r in recs if r["value"] == 0)
        assert sum("TypeError" in r or "must be" in r for r in reasons) == sum(
            1 for r in recs if r["value"] != 0 and 100 / r["value"] < 0
        )
        assert all(h["ht.rejected.by"] for h in node.deadletters())
        assert node.stats.rejected == len(reasons)
    assert sorted(h["ht.error"] for h in first.deadletters()) == sorted(h["ht.error"] for h in second.deadletters())


def test_stale_tentative_input_after_a_switch_is_dropped_not_deadlettered() -> None:
    node = FakeNode(MERGE_AFTER_WINDOW, "n")
    rec = readings(1, 1, 0)[0]
    stable = [node.message("a", STABLE, i, 10 + i, dict(rec, ts=10 + i)) for i in range(5)]
    node.step(stable + [node.message("a", BOUNDARY, 4, 50)], 0.0)
    # The new upstream replica is behind: it still sends tentative tuples the port already has
    # the stable version of (ids <= last stable), and ones below the input's boundary.
    stale = [node.message("a", TENTATIVE, 3, 13, dict(rec, ts=13)), node.message("a", TENTATIVE, 5, 20, rec)]
    node.step(stale, 0.0)
    assert node.deadletters() == []
    assert node.stats.skipped.get("stale tentative") == 2


def test_a_result_that_does_not_fit_its_stream_schema_is_deadlettered_before_it_gets_an_id() -> None:
    spec = parse_spec("""\
name: fit
streams:
  a: {schema: reading, key: sensor}
  out: {schema: reading, key: sensor}
operators:
  half: {type: map, input: a, output: out, fields: {sensor: sensor, ts: ts, value: "None if seq % 4 == 1 else value / 2", seq: seq}}
nodes:
  n: {operators: [half]}
""")
    node = FakeNode(spec, "n")
    recs = readings(12, 10, 0)
    run(node, source_messages(node, "a", recs) + [node.message("a", BOUNDARY, 11, 10**6)], [5])
    got = node.stable("out")
    assert [tid for tid, _ in got] == list(range(9)), "ids stay dense: a rejected result gets none"
    assert [r["seq"] for _, r in got] == [r["seq"] for r in recs if r["seq"] % 4 != 1]
    reasons = [h["ht.error"].decode() for h in node.deadletters()]
    assert len(reasons) == 3 and all("does not fit stream 'out'" in r for r in reasons)


def test_a_replica_restarted_from_an_image_taken_in_a_failure_reconciles_to_the_failure_free_output(
    monkeypatch: Any,
) -> None:
    """Images go on during an upstream failure (the state before it, plus the kept buckets); a
    replica that dies in the failure restarts into it and still reconciles."""
    import pickle

    healthy = FakeNode(MERGE_AFTER_WINDOW, "n")
    run(healthy, merge_inputs(healthy), [4])
    first = FakeNode(MERGE_AFTER_WINDOW, "n", replica=1)
    msgs = merge_inputs(first)
    silent = first.inputs.ports[1].topic
    cut = len(msgs) // 3
    base, delay = time.monotonic(), first.plan.delay_s
    first.scheme.next_image = base + 1e9  # no image before the failure
    run(first, msgs[:cut], [3], now=base)
    flowing = [m for m in msgs[cut:] if m.topic() != silent]
    run(first, flowing[: len(flowing) // 2], [3], now=base + delay + 1)
    assert first.scheme.path.failed and first.stats.tentative > 0
    first.scheme.next_image = 0.0
    first.step([], base + delay + 1)  # the periodic image, in the failure
    images = first.producer.topics[first.scheme.restart_topic]
    assert images, "no restart image written during the failure"
    newest = images[-1].value
    assert newest is not None
    image = pickle.loads(newest)
    assert image.failed and image.sunion.kept, "the image must hold the kept buckets to redo"

    second, offsets = restarted(first, monkeypatch)  # kill -9; the replica restarts on the same topics
    assert second.scheme.path.failed, "the restarted replica is still in the failure"
    rest = [m for m in msgs if m.offset() >= offsets.get(m.topic(), 0)]
    run(second, [m for m in rest if m.topic() != silent], [3], now=time.monotonic() + delay + 1)
    run(second, [m for m in rest if m.topic() == silent], [5], now=time.monotonic() + delay + 2)
    assert second.stats.reconciliations == 1
    for stream in ("merged", "pairs"):
        assert second.stable(stream) == healthy.stable(stream), f"{stream} differs from the failure-free run"


def test_a_source_id_that_jumps_is_deadlettered_and_never_used_to_drop_later_tuples() -> None:
    node = FakeNode(MERGE_AFTER_WINDOW, "n")
    recs = readings(6, 10, 0)
    msgs = [node.message("a", STABLE, i, r["ts"], r) for i, r in enumerate(recs[:3])]
    msgs.append(node.message("a", STABLE, 1_000_000, recs[3]["ts"], recs[3]))  # another writer's id
    msgs += [node.message("a", STABLE, i, r["ts"], r) for i, r in enumerate(recs[3:], start=3)]
    node.step(msgs, 0.0)
    reasons = [h["ht.error"].decode() for h in node.deadletters()]
    assert len(reasons) == 1 and "jumps past 2" in reasons[0]
    assert node.inputs.ports[0].last_stable == 5, "the tuples after the jump are taken, not dropped as duplicates"


def test_a_source_id_that_goes_backwards_is_deadlettered_not_dropped_silently() -> None:
    """A second writer on a typed input stream repeats ids the stream already has: each of its
    tuples is rejected with the reason, and the first writer's later tuples still go through."""
    node = FakeNode(MERGE_AFTER_WINDOW, "n")
    recs = readings(8, 10, 0)
    msgs = [node.message("a", STABLE, i, r["ts"], r) for i, r in enumerate(recs[:4])]
    msgs += [node.message("a", STABLE, i, r["ts"], r) for i, r in enumerate(recs[4:6])]  # ids 0, 1 again
    msgs += [node.message("a", STABLE, i, r["ts"], r) for i, r in enumerate(recs[4:], start=4)]
    node.step(msgs, 0.0)
    reasons = [h["ht.error"].decode() for h in node.deadletters()]
    assert len(reasons) == 2 and all("goes backwards" in r for r in reasons), reasons
    assert node.inputs.ports[0].last_stable == 7
    assert [reason_label(r) for r in reasons] == ["id_jump"] * 2, "counted where metrics read it"


def test_a_source_first_id_must_be_zero_unless_the_log_was_trimmed() -> None:
    """Another client's tuple with ``ht.id=1000000`` first in a stream's log is rejected; it must
    not become the stream's position, which would drop every later tuple as a duplicate."""
    node = FakeNode(MERGE_AFTER_WINDOW, "n")
    recs = readings(5, 10, 0)
    msgs = [node.message("a", STABLE, 1_000_000, recs[0]["ts"], recs[0])]
    msgs += [node.message("a", STABLE, i, r["ts"], r) for i, r in enumerate(recs)]
    node.step(msgs, 0.0)
    reasons = [h["ht.error"].decode() for h in node.deadletters()]
    assert len(reasons) == 1 and "jumps past -1" in reasons[0], reasons
    assert node.inputs.ports[0].last_stable == 4

    trimmed = FakeNode(MERGE_AFTER_WINDOW, "n")
    trimmed.offsets[trimmed.spec.topic("a")] = (
        500  # retention removed the first 500 messages before this node ever read
    )
    msgs = [trimmed.message("a", STABLE, i, r["ts"], r) for i, r in enumerate(recs, start=300)]
    trimmed.step(msgs, 0.0)
    assert trimmed.deadletters() == [] and trimmed.inputs.ports[0].last_stable == 304


def test_a_gap_in_an_upstream_replica_stops_the_port_until_it_reads_the_ids_again() -> None:
    node = FakeNode(CHAIN, "n2")
    recs = readings(8, 10, 0)
    msgs = [node.message("b", STABLE, i, r["ts"], r) for i, r in enumerate(recs) if i not in (3, 4)]
    node.step(msgs, 0.0)
    port = node.inputs.ports[0]
    assert port.last_stable == 2 and port.gap == 3 and node.stats.gaps == 1
    assert node.deadletters() == [], "a gap in a replica's log is read again, not dead-lettered"


def test_a_grant_is_matched_to_its_request_by_round_not_by_comparing_clocks() -> None:
    """The coordinator's clock is 5 s behind this replica's: its GRANT still counts."""
    from services.control.messages import ControlKind, Grant
    from services.control.states import NodeState

    node = FakeNode(MERGE_AFTER_WINDOW, "n")
    node.monitor.known[("coordinator", 0, 0)] = NodeState.STABLE  # a live coordinator: ask it
    msgs = merge_inputs(node)
    silent = node.inputs.ports[1].topic
    cut = len(msgs) // 3
    run(node, msgs[:cut], [3], now=0.0)
    run(node, [m for m in msgs[cut:] if m.topic() != silent], [3], now=node.plan.delay_s + 1)
    node.scheme.round.requested_at = -10.0
    run(node, [m for m in msgs[cut:] if m.topic() == silent], [5], now=node.plan.delay_s + 3)
    [request] = [c for c in node.controls if c.kind is ControlKind.REQUEST][-1:]
    assert node.stats.reconciliations == 0 and request.round_ms
    grant = Grant("n", 0, 0, sent_ms=request.round_ms - 5000, round_ms=request.round_ms)
    node.scheme.on_control(grant, node.plan.delay_s + 4)
    node.step([], node.plan.delay_s + 4)
    assert node.stats.reconciliations == 1
    done = node.controls[-1]
    assert done.kind is ControlKind.DONE and done.round_ms == request.round_ms


def test_a_granted_replica_waits_while_its_partner_reconciles_and_a_fallback_turn_is_announced() -> None:
    from services.control.messages import ControlKind, Grant
    from services.control.states import NodeState

    node = FakeNode(MERGE_AFTER_WINDOW, "n")
    msgs = merge_inputs(node)
    silent = node.inputs.ports[1].topic
    cut = len(msgs) // 3
    node.monitor.known[("coordinator", 0, 0)] = NodeState.STABLE
    node.monitor.known[("n", 0, 1)] = NodeState.STABILIZATION  # the partner reconciles (its own fallback turn)
    run(node, msgs[:cut], [3], now=0.0)
    run(node, [m for m in msgs[cut:] if m.topic() != silent], [3], now=node.plan.delay_s + 1)
    run(node, [m for m in msgs[cut:] if m.topic() == silent], [5], now=node.plan.delay_s + 3)
    request = [c for c in node.controls if c.kind is ControlKind.REQUEST][-1]
    node.scheme.on_control(Grant("n", 0, 0, round_ms=request.round_ms), 0)
    node.step([], node.plan.delay_s + 4)
    assert node.stats.reconciliations == 0, "a GRANT must not make two replicas reconcile at once"
    node.monitor.known[("n", 0, 1)] = NodeState.STABLE
    node.step([], node.plan.delay_s + 5)
    assert node.stats.reconciliations == 1

    alone = FakeNode(MERGE_AFTER_WINDOW, "n")  # no coordinator: turn-taking by replica number
    run(alone, msgs[:cut], [3], now=0.0)
    run(alone, [m for m in msgs[cut:] if m.topic() != silent], [3], now=alone.plan.delay_s + 1)
    run(alone, [m for m in msgs[cut:] if m.topic() == silent], [5], now=alone.plan.delay_s + 3)
    assert alone.stats.reconciliations == 1
    kinds = [c.kind for c in alone.controls]
    assert kinds[-2:] == [ControlKind.REQUEST, ControlKind.DONE], "the fallback turn is announced and closed"


def restarted(first: FakeNode, monkeypatch: Any) -> tuple[FakeNode, dict[str, int]]:
    """A new incarnation of ``first`` (same topics), restarted from its newest restart image."""
    import pickle

    from services.node import resume

    images = first.producer.topics[first.scheme.restart_topic]
    second = FakeNode(first.spec, first.node, replica=first.replica)
    second.producer.topics = first.producer.topics
    second.offsets.update(first.offsets)

    def newest_image(*a: Any) -> Any:
        value = images[-1].value
        assert value is not None, "a restart image is never a tombstone"
        return pickle.loads(value)

    monkeypatch.setattr(resume.restart, "load", newest_image)
    monkeypatch.setattr(resume, "first_offset", lambda *a: 0)
    monkeypatch.setattr(
        resume, "last_stable_id", lambda b, topic, p: max((tid for tid, _ in second.stable_in(topic)), default=-1)
    )
    monkeypatch.setattr(
        resume,
        "stable_after",
        lambda b, topic, p, last: {tid: held for tid, held in second.stable_in(topic) if tid > last},
    )
    offsets = second.scheme.on_restart()
    assert offsets is not None  # DPC reads its inputs at once
    return second, offsets


def test_a_restarted_replica_says_recovering_until_it_caught_up_then_closes_its_undo_under_constant_load(
    monkeypatch: Any,
) -> None:
    """Heartbeats of a replica that replays what it already wrote must not make readers
    prefer it; once caught up it says STABLE and sends REC_DONE, idle poll or not."""
    from services.control.states import NodeState
    from services.core.tuples import REC_DONE

    first = FakeNode(CHAIN, "n1")
    msgs = source_messages(first, "a", readings(40, 10, 3)) + [first.message("a", BOUNDARY, 39, 10**6)]
    first.scheme.next_image = 1e18
    for m in msgs[:30]:
        first.step([m], 0.0)
    first.scheme.next_image = 0.0
    first.step([], 0.0)  # an image after 15 tuples
    for m in msgs[30:60]:
        first.step([m], 0.0)  # 15 more written, then kill -9

    second, offsets = restarted(first, monkeypatch)
    rest = [m for m in msgs if m.offset() >= offsets.get(m.topic(), 0)]
    assert rest and second.states[-1:] != [NodeState.STABLE]
    announced = []
    for m in rest:  # never an idle poll: input keeps coming
        second.step([m], 0.0)
        announced.append(second.states[-1] if second.states else None)
    assert NodeState.RECOVERING not in announced[-1:], "caught up: the replica must say so"
    assert announced[-1] is NodeState.STABLE
    written = second.written("b")
    assert [w[0] for w in written].count(REC_DONE) == 1, "the restart's UNDO is closed without waiting for idleness"
    ids = [tid for tid, _ in second.stable("b")]
    assert ids == list(range(40)), "each stable id once, in order"


def test_a_restarted_replica_is_recovering_while_its_replay_is_deduplicated(monkeypatch: Any) -> None:
    from services.control.states import NodeState

    first = FakeNode(CHAIN, "n1")
    msgs = source_messages(first, "a", readings(40, 10, 3))
    first.scheme.next_image = 0.0
    first.step(msgs[:2], 0.0)  # an image after the first tuple
    first.scheme.next_image = 1e18
    for m in msgs[2:]:
        first.step([m], 0.0)

    second, _ = restarted(first, monkeypatch)
    second.step([], 0.0)
    assert second.states[-1:] in ([], [NodeState.RECOVERING])
    assert second.scheme.recovering, "nothing replayed yet: it has everything to catch up"


def test_a_node_whose_input_fails_again_before_it_reconciled_still_reconciles_what_is_settled() -> None:
    """n1 reconciles and fails again at once (REC_DONE, then new tentative tuples in the same
    poll): n2's first failure is settled, the second is not. n2 must not wait for the second
    to end before its stable output covers the first."""
    from services.control.messages import ControlKind, Grant
    from services.control.states import NodeState
    from services.core.tuples import REC_DONE, UNDO

    def reading(i: int) -> dict:
        return {"sensor": f"s{i % 3}", "ts": i * 10, "value": float(i), "seq": i}

    n2 = FakeNode(CHAIN, "n2")
    n2.monitor.known[("coordinator", 0, 0)] = NodeState.STABLE  # turns come from the coordinator
    delay = n2.plan.delay_s

    def stable(ids: range) -> list[FakeMessage]:
        return [n2.message("b", STABLE, i, i * 10, reading(i)) for i in ids]

    def tentative(ids: range) -> list[FakeMessage]:
        return [n2.message("b", TENTATIVE, i, i * 10, reading(i)) for i in ids]

    n2.step(stable(range(10)) + [n2.message("b", BOUNDARY, 9, 100)], 0.0)
    n2.step(tentative(range(10, 20)), 1.0)  # n1 in failure
    n2.step([], 1.0 + delay)
    assert n2.scheme.path.failed
    healed = [n2.message("b", UNDO, 9, 0)] + stable(range(10, 20)) + [n2.message("b", BOUNDARY, 19, 200)]
    again = [n2.message("b", REC_DONE, 19, 0)] + tentative(range(20, 30))  # and n1 fails again
    n2.step(healed + again, 3.0)
    assert n2.controls[-1].kind is ControlKind.REQUEST, "the first failure is settled: n2 asks for its turn"
    n2.step([], 3.0 + delay)  # the second failure's bucket is overdue: tentative, kept, not settled
    grant = Grant("n2", 0, 0, round_ms=n2.scheme.round.requested_ms)
    n2.scheme.on_control(grant, 3.0 + delay + 0.1)  # the turn comes only now
    n2.step([], 3.0 + delay + 0.1)
    assert [tid for tid, _ in n2.stable("c")] == list(range(20)), "the first failure's results are stable"
    assert n2.scheme.path.failed, "the second failure goes on"
    assert n2.written("c")[-1][0] is TENTATIVE, "and its results are tentative again"
    assert n2.scheme.path.advanced == 200, "downstream learns that everything before the second failure is stable"

    n2.step([n2.message("b", UNDO, 19, 0)] + stable(range(20, 30)) + [n2.message("b", BOUNDARY, 29, 300)], 9.0)
    n2.scheme.on_control(Grant("n2", 0, 0, round_ms=n2.scheme.round.requested_ms), 9.0)
    n2.step([], 9.0)
    healthy = FakeNode(CHAIN, "n2", replica=1)
    healthy.step([healthy.message("b", STABLE, i, i * 10, reading(i)) for i in range(30)], 0.0)
    healthy.step([healthy.message("b", BOUNDARY, 29, 300)], 0.0)
    assert n2.stable("c") == healthy.stable("c") and not n2.scheme.path.failed


def spilled_merge(method: str) -> tuple[FakeNode, FakeNode, list[FakeMessage], float]:
    """A healthy node, and one whose input c went silent for longer than max_kept (4) allows:
    with c's held messages and the time it is at."""
    spec = parse_spec(
        MERGE_TEXT.replace("nodes:", "dpc: {max_kept: 4}\nnodes:").replace(
            "mix, near]}", f"mix, near], reconciliation: {method}}}"
        )
    )
    healthy, failing = FakeNode(spec, "n"), FakeNode(spec, "n", replica=1)
    run(healthy, merge_inputs(healthy), [4])
    msgs = merge_inputs(failing)
    cut = len(msgs) // 4
    c_topic = failing.inputs.ports[1].topic
    held = [m for m in msgs[cut:] if m.topic() == c_topic]
    flowing = [m for m in msgs[cut:] if m.topic() != c_topic]
    run(failing, msgs[:cut], [3], now=0.0)
    delay = failing.plan.delay_s
    run(failing, flowing, [3], now=delay + 1)
    su = failing.scheme.path.sunion
    assert failing.stats.tentative > 0 and su.spilled, "the failure outgrew max_kept"
    assert su.peak_kept <= 4
    if method == "undo":
        logs = failing.pipeline.logs or []
        assert logs and all(lg.mark_at is None for lg in logs), "no mark pins the input logs: they trim again"
    return healthy, failing, held, delay + 2


@pytest.mark.parametrize("method", ["checkpoint", "undo"])
def test_a_failure_longer_than_max_kept_is_redone_from_the_logs_to_the_failure_free_output(
    method: str, monkeypatch: Any
) -> None:
    """Input c silent for most of the run: the node keeps at most max_kept tuples of the
    failure, and once c heals it reads both inputs again from where the failure began."""
    from services.node import resume

    monkeypatch.setattr(resume, "first_offset", lambda *a: 0)
    healthy, failing, held, now = spilled_merge(method)
    su = failing.scheme.path.sunion
    run(failing, held, [5], now=now)  # c heals: the turn comes, the node rewinds its inputs
    assert failing.stats.replays == 1 and failing.states[-1] is NodeState.STABILIZATION
    replay = failing.take_replay()
    assert replay, "the inputs are read again from where the failure began"
    run(failing, replay, [7], now=now + 1)
    assert failing.states[-1] is NodeState.STABLE and failing.stats.reconciliations == 1
    assert failing.controls[-1].kind is ControlKind.DONE, "the turn is given back once the redo is done"
    for stream in ("merged", "pairs"):
        written = [t for t, *_ in failing.written(stream)]
        assert UNDO in written and written[-1] is REC_DONE
        assert failing.stable(stream) == healthy.stable(stream), (
            f"{stream}: the redo from the logs numbered differently"
        )
    assert su.peak_kept <= 4


def test_a_redo_from_the_logs_stops_with_one_line_when_retention_removed_the_input(monkeypatch: Any) -> None:
    from services.core.errors import RestartImageError
    from services.node import resume

    monkeypatch.setattr(resume, "first_offset", lambda *a: 10**6)
    _, failing, held, now = spilled_merge("checkpoint")
    with pytest.raises(RestartImageError, match=r"must replay .* raise the inputs' retention above the longest"):
        run(failing, held, [5], now=now)
    assert failing.stats.replays == 0 and not failing.take_replay(), "nothing read again: the node stops"


def test_a_restart_image_of_a_spilled_failure_is_its_start_and_a_restart_from_it_reconciles(monkeypatch: Any) -> None:
    def reading(i: int) -> dict:
        return {"sensor": f"s{i % 3}", "ts": i * 10, "value": float(i), "seq": i}

    first = FakeNode(CHAIN, "n2")
    first.scheme.path.sunion.max_kept = 5
    first.step([first.message("b", STABLE, i, i * 10, reading(i)) for i in range(10)], 0.0)
    first.step([first.message("b", BOUNDARY, 9, 100)], 0.0)
    first.step([first.message("b", TENTATIVE, i, i * 10, reading(i)) for i in range(10, 30)], 1.0)
    first.step([], 1.0 + first.plan.delay_s)
    assert first.scheme.path.sunion.spilled
    first.scheme.next_image = 0.0
    first.step([], 2.0 + first.plan.delay_s)
    value = first.producer.topics[first.plan.restart_topics[0]][-1].value
    assert value is not None
    image = pickle.loads(value)
    start = first.scheme.failure_start
    assert start is not None and image.sunion == start.sunion and image.offsets == start.offsets
    assert image.ports == {"b": (0, 9)} and not image.failed, "the image is the failure's start"
    assert not image.sunion.kept
    second, offsets = restarted(first, monkeypatch)
    assert offsets == image.offsets
    healed = [second.message("b", UNDO, 9, 0)]
    healed += [second.message("b", STABLE, i, i * 10, reading(i)) for i in range(10, 30)]
    second.step(healed + [second.message("b", BOUNDARY, 29, 300)], 5.0)
    healthy = FakeNode(CHAIN, "n2", replica=1)
    healthy.step([healthy.message("b", STABLE, i, i * 10, reading(i)) for i in range(30)], 0.0)
    healthy.step([healthy.message("b", BOUNDARY, 29, 300)], 0.0)
    assert second.stable("c") == healthy.stable("c")


def _out_of_order(jitter: list[int]) -> list[tuple[int, int | None]]:
    """(stime, boundary after it or None) of a stream whose times go back by up to 25 ms; each
    boundary is the smallest time still to come, so the stream keeps its promises."""
    times = [10 * i + j for i, j in enumerate(jitter)]
    later = [min(times[i + 1 :], default=10**6) for i in range(len(times))]
    return [(t, later[i] if i % 5 == 4 else None) for i, t in enumerate(times)]


def _one_input(node: FakeNode, stream: list[tuple[int, int | None]], ids: range, ttype: Any = STABLE) -> list:
    msgs = []
    for i in ids:
        stime, bound = stream[i]
        msgs.append(node.message("b", ttype, i, stime, {"sensor": f"s{i % 3}", "ts": stime, "value": 1.0, "seq": i}))
        if bound is not None and ttype is STABLE:
            msgs.append(node.message("b", BOUNDARY, i, bound))
    return msgs


def test_a_node_with_one_input_sends_its_stable_results_in_the_poll_that_brought_the_input() -> None:
    n2 = FakeNode(CHAIN, "n2")
    n2.step(_one_input(n2, [(10 * i, None) for i in range(5)], range(5)), 0.0)  # no boundary yet
    assert [(t, tid) for t, tid, _, _ in n2.written("c")] == [(STABLE, i) for i in range(5)]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 25), min_size=40, max_size=40),
    st.lists(st.integers(1, 9), min_size=1, max_size=4),
    st.integers(1, 30),
)
def test_a_node_with_one_input_keeps_its_order_through_a_failure_and_its_redo(
    jitter: list[int], cuts: list[int], fail_at: int
) -> None:
    """Each replica takes the input in its log order (times going back included), whatever its polls, and
    a replica whose input went tentative for a while redoes it to the very same stable output."""
    stream = _out_of_order(jitter)
    healthy = FakeNode(CHAIN, "n2", replica=1)
    run(healthy, _one_input(healthy, stream, range(40)) + [healthy.message("b", BOUNDARY, 39, 10**6)], cuts)
    assert [r["seq"] for _, r in healthy.stable("c")] == list(range(40)), "the input's order, not its times'"

    failing = FakeNode(CHAIN, "n2")
    run(failing, _one_input(failing, stream, range(fail_at)), cuts, now=0.0)
    run(failing, _one_input(failing, stream, range(fail_at, 40), TENTATIVE), cuts, now=1.0)  # n1 in failure
    failing.step([], 1.0 + failing.plan.delay_s)
    assert failing.scheme.path.failed and failing.stats.tentative > 0
    healed = [failing.message("b", UNDO, fail_at - 1, 0)] + _one_input(failing, stream, range(fail_at, 40))
    run(failing, healed + [failing.message("b", BOUNDARY, 39, 10**6)], cuts, now=3.0)
    assert failing.stats.reconciliations == 1 and not failing.scheme.path.failed
    assert failing.stable("c") == healthy.stable("c")


def test_bad_input_to_a_node_with_one_input_is_deadlettered_with_its_reason_and_the_node_goes_on() -> None:
    """The short path of a one-input node hands every message it cannot take to the general one, which says why."""
    n1 = FakeNode(CHAIN, "n1")
    rec = {"sensor": "s0", "ts": 10, "value": 1.0, "seq": 0}
    good = n1.message("a", STABLE, 0, 10, rec)
    bound = n1.message("a", BOUNDARY, 0, 50)
    late = n1.message("a", STABLE, 1, 20, dict(rec, ts=20, seq=1))  # below the boundary just promised
    garbage = n1.message("a", STABLE, 1, 60, rec)
    garbage._value = b"\xff\xff"  # not Avro
    no_headers = FakeMessage(garbage.topic(), good.value(), [], 99)
    cut_short = FakeMessage(garbage.topic(), good.value(), [("ht", b"STABLE,1,60")], 100)
    last = n1.message("a", STABLE, 1, 70, dict(rec, ts=70, seq=7))
    n1.step([good, bound, late, garbage, no_headers, cut_short, last], 0.0)
    reasons = [h["ht.error"].decode() for h in n1.deadletters()]
    assert len(reasons) == 4 and n1.stats.deadlettered == 4
    assert "below the input's boundary" in reasons[0]
    assert "not valid Avro" in reasons[1]
    assert "missing ht header" in reasons[2]
    assert "has 3 fields, not TYPE,id,stime,replica,epoch,schema" in reasons[3]
    assert [r["seq"] for _, r in n1.stable("b")] == [0, 7], "the good tuples on either side go through"
