"""A node's input port switching upstream replicas as the paper defines it (rules 3 and 4).

n2 reads stream b of n1 (two replicas) through a pass-through filter. Both replicas of n1 saw
the same input, so their tentative tuples carry the same t_max for the same results.
"""

from __future__ import annotations

from typing import Any

import pytest

from services.client.workload import readings
from services.control.states import NodeState
from services.core.tuples import REC_DONE, UNDO
from services.dpc import seeks
from services.dpc.switching import Move
from tests.unit.dpc.fake_node import BOUNDARY, CHAIN, STABLE, TENTATIVE, FakeMessage, FakeNode

LATER = 100.0  # past every wait


@pytest.fixture(autouse=True)
def no_kafka_seek(monkeypatch: Any) -> None:
    """Where a move starts in the new topic does not matter here: the test hands the messages over."""
    monkeypatch.setattr(seeks, "seek_after_stable", lambda *a, **k: (0, 0))
    monkeypatch.setattr(seeks, "seek_after_tentative", lambda *a, **k: (0, 0))
    monkeypatch.setattr(seeks, "seek_fresh", lambda *a, **k: (0, 0))
    monkeypatch.setattr(seeks, "undo_after", lambda *a, **k: (0, 0))


STEP = 100  # one tuple per SUnion bucket


def rec(ts: int) -> dict:
    return dict(next(iter(readings(1, 1, 0))), ts=ts, seq=ts)


def tentative(node: FakeNode, replica: int, ids: range, first_ts: int) -> list[FakeMessage]:
    """Replica ``replica`` of n1's tentative tuples, one per input tuple: t_max is the tuple's own time."""
    return [
        node.message("b", TENTATIVE, i, t, rec(t), replica, tmax=t)
        for i, t in zip(ids, range(first_ts, first_ts + STEP * len(ids), STEP), strict=True)
    ]


def stable(node: FakeNode, replica: int, ids: range, first_ts: int) -> list[FakeMessage]:
    times = range(first_ts, first_ts + STEP * len(ids), STEP)
    msgs = [node.message("b", STABLE, i, t, rec(t), replica) for i, t in zip(ids, times, strict=True)]
    return msgs + [node.message("b", BOUNDARY, ids[-1], first_ts + STEP * len(ids), None, replica)]


def in_failure(node: FakeNode) -> None:
    """n1.r0 sent stable 0..4 (times 1000..1400), then tentative 5..7 (times 2000..2200): n2 is tentative."""
    node.step(stable(node, 0, range(5), 1000), 0.0)
    node.step(tentative(node, 0, range(5, 8), 2000), LATER)
    node.step([], LATER)
    assert node.scheme.path.failed


def tentative_times(node: FakeNode) -> list[int]:
    return [t[2] for t in node.written("c") if t[0] is TENTATIVE]


def switch(node: FakeNode, states: dict[int, NodeState]) -> list[Move]:
    for r, st in states.items():
        node.monitor.known[("n1", 0, r)] = st
    moves = node.inputs.follow_best(node.monitor, "unused")  # type: ignore[arg-type]
    for port, move in moves:
        node.scheme.on_input_move(node.intake.on_input_move(port, move, LATER), LATER)
    return [m for _, m in moves]


def test_rule_3_a_switch_to_a_replica_in_failure_keeps_the_tentative_input_and_takes_only_newer() -> None:
    node = FakeNode(CHAIN, "n2")
    in_failure(node)
    assert switch(node, {0: NodeState.FAILED, 1: NodeState.UPSTREAM_FAILURE}) == [Move.TENTATIVE]
    # n1.r1 had the same input: its tentative tuples up to time 2200 are the ones n2 already has.
    node.step(tentative(node, 1, range(5, 10), 2000), LATER)
    node.step([], 2 * LATER)  # the last bucket waits for its input's next tuple, or until it stalls
    assert tentative_times(node) == [2000, 2100, 2200, 2300, 2400], "each tentative result once, none dropped"
    assert node.stats.skipped.get("stale tentative") == 3


def test_rule_3_stable_tuples_of_the_new_replica_replace_the_tentative_input_kept() -> None:
    node = FakeNode(CHAIN, "n2")
    in_failure(node)
    switch(node, {0: NodeState.FAILED, 1: NodeState.UPSTREAM_FAILURE})
    # n1.r1 reconciles: UNDO, the stable version of the failure, REC_DONE.
    node.step([node.message("b", UNDO, 4, 0, None, 1), *stable(node, 1, range(5, 10), 2000)], LATER)
    node.step([node.message("b", REC_DONE, 9, 0, None, 1)], LATER)
    node.step([], LATER)
    stable_out = [t[2] for t in node.written("c") if t[0] is STABLE]
    assert stable_out == [1000, 1100, 1200, 1300, 1400, 2000, 2100, 2200, 2300, 2400]
    assert not node.scheme.path.failed and node.stats.reconciliations == 1


def test_rule_4_corrections_are_read_from_the_reconciling_replica_while_another_supplies_new_tuples() -> None:
    node = FakeNode(CHAIN, "n2")
    in_failure(node)
    assert switch(node, {0: NodeState.STABILIZATION, 1: NodeState.UPSTREAM_FAILURE}) == [Move.FRESH]
    port = node.inputs.ports[0]
    assert port.replica == 0 and port.fresh == 1
    # n1.r0 reconciles (UNDO, corrections) while n1.r1 goes on with new tentative tuples.
    node.step([node.message("b", UNDO, 4, 0, None, 0), *stable(node, 0, range(5, 8), 2000)], LATER)
    node.step(tentative(node, 1, range(5, 12), 2000), LATER)
    node.step([], 2 * LATER)
    assert tentative_times(node) == [2000, 2100, 2200, 2300, 2400, 2500, 2600], (
        "new results go on from the fresh replica"
    )
    # REC_DONE on the corrected stream: its stable stream goes on, the fresh replica is left.
    node.step([node.message("b", REC_DONE, 7, 0, None, 0)], LATER)
    assert port.fresh is None and port.topic == port.topics[0]
    node.step(stable(node, 0, range(8, 12), 2300), 2 * LATER)
    node.step([], 2 * LATER)
    stable_out = [t[2] for t in node.written("c") if t[0] is STABLE]
    assert stable_out == [1000, 1100, 1200, 1300, 1400, 2000, 2100, 2200, 2300, 2400, 2500, 2600], (
        "the failure-free output, once"
    )
    assert not node.scheme.path.failed


def test_rule_4_goes_on_after_the_reconciling_replicas_stable_heartbeat_until_its_rec_done_is_read() -> None:
    node = FakeNode(CHAIN, "n2")
    in_failure(node)
    switch(node, {0: NodeState.STABILIZATION, 1: NodeState.UPSTREAM_FAILURE})
    port = node.inputs.ports[0]
    node.step([node.message("b", UNDO, 4, 0, None, 0), *stable(node, 0, range(5, 7), 2000)], LATER)
    # n1.r0 has reconciled (its heartbeat says so) but n2 has not read all its corrections yet:
    # its new stable tuples are behind them, so new ones still come from n1.r1.
    assert switch(node, {0: NodeState.STABLE}) == []
    assert port.fresh == 1
    node.step(tentative(node, 1, range(5, 12), 2000), LATER)
    node.step([], 2 * LATER)
    assert tentative_times(node) == [2000, 2100, 2200, 2300, 2400, 2500, 2600], "new results go on meanwhile"
    node.step([*stable(node, 0, range(7, 8), 2200), node.message("b", REC_DONE, 7, 0, None, 0)], LATER)
    assert port.fresh is None and port.topic == port.topics[0], "its REC_DONE ends the fresh read"
    node.step(stable(node, 0, range(8, 12), 2300), 2 * LATER)
    node.step([], 2 * LATER)
    stable_out = [t[2] for t in node.written("c") if t[0] is STABLE]
    assert stable_out == [1000, 1100, 1200, 1300, 1400, 2000, 2100, 2200, 2300, 2400, 2500, 2600]


def test_a_partner_that_begins_to_reconcile_gives_its_corrections_while_the_followed_replica_goes_on() -> None:
    node = FakeNode(CHAIN, "n2")
    in_failure(node)
    assert switch(node, {0: NodeState.UPSTREAM_FAILURE, 1: NodeState.UPSTREAM_FAILURE}) == []
    assert switch(node, {1: NodeState.STABILIZATION}) == [Move.CORRECT]
    port = node.inputs.ports[0]
    assert port.replica == 1 and port.fresh == 0
    # n1.r0 goes on in its failure: its new tentative tuples are processed as they come.
    node.step(tentative(node, 0, range(8, 10), 2300), LATER)
    node.step([], 2 * LATER)
    assert tentative_times(node) == [2000, 2100, 2200, 2300, 2400]
    # n1.r1's UNDO, its corrections and REC_DONE: the stable stream, once.
    node.step([node.message("b", UNDO, 4, 0, None, 1), *stable(node, 1, range(5, 10), 2000)], LATER)
    node.step([node.message("b", REC_DONE, 9, 0, None, 1)], LATER)
    assert port.fresh is None and port.replica == 1
    node.step(stable(node, 1, range(10, 12), 2500), 2 * LATER)
    node.step([], 2 * LATER)
    stable_out = [t[2] for t in node.written("c") if t[0] is STABLE]
    assert stable_out == [1000, 1100, 1200, 1300, 1400, 2000, 2100, 2200, 2300, 2400, 2500, 2600]
    assert tentative_times(node) == [2000, 2100, 2200, 2300, 2400], "no tentative result twice"
    assert not node.scheme.path.failed


def test_rule_4_ends_when_the_reconciling_replica_fails_by_following_the_fresh_one() -> None:
    node = FakeNode(CHAIN, "n2")
    in_failure(node)
    switch(node, {0: NodeState.STABILIZATION, 1: NodeState.UPSTREAM_FAILURE})
    assert switch(node, {0: NodeState.FAILED}) == [Move.PROMOTE]
    port = node.inputs.ports[0]
    assert port.replica == 1 and port.fresh is None
    node.step(tentative(node, 1, range(5, 10), 2000), LATER)
    node.step([], 2 * LATER)
    # 2200 was not processed yet when n1.r0 began to reconcile: n1.r0's version is void, n1.r1's is taken.
    assert tentative_times(node) == [2000, 2100, 2200, 2300, 2400], "each once, none lost"


def test_rule_4_is_left_when_a_stable_replica_appears() -> None:
    node = FakeNode(CHAIN, "n2")
    in_failure(node)
    switch(node, {0: NodeState.STABILIZATION, 1: NodeState.UPSTREAM_FAILURE})
    assert switch(node, {1: NodeState.STABLE}) == [Move.END_FRESH]
    assert switch(node, {}) == [Move.STABLE]
    assert node.inputs.ports[0].replica == 1


def test_rule_4_after_the_undo_came_first_the_fresh_replica_gives_only_what_the_corrections_do_not() -> None:
    node = FakeNode(CHAIN, "n2")
    in_failure(node)
    # n1.r0's UNDO reaches n2 before its STABILIZATION heartbeat does.
    node.step([node.message("b", UNDO, 4, 0, None, 0)], LATER)
    assert switch(node, {0: NodeState.STABILIZATION, 1: NodeState.UPSTREAM_FAILURE}) == [Move.FRESH]
    node.step(tentative(node, 1, range(5, 12), 2000), LATER)  # before n1.r0's corrections
    node.step([], 2 * LATER)
    assert tentative_times(node) == [2000, 2100, 2200, 2300, 2400, 2500, 2600], "each tentative result once"
