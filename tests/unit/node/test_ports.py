"""Input ports: what a restart image records of where each input is."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from services.core.errors import InputGapError
from services.core.tuples import REC_DONE, UNDO
from services.dpc.states import NodeState
from services.node import ports
from services.node.ports import Inputs, Move
from services.spec.plan import plan_node
from tests.unit.dpc.fake_node import CHAIN, FakeMonitor

SPEC = CHAIN


class FakeConsumer:
    """Knows a position only for partitions a message was read from, as librdkafka does."""

    def __init__(self) -> None:
        self.assigned: list[TopicPartition] = []
        self.read: dict[str, int] = {}

    def assign_offsets(self, tps: list[TopicPartition]) -> None:
        self.assigned = list(tps)

    def positions(self) -> list[TopicPartition]:
        return [TopicPartition(t, 0, off) for t, off in self.read.items()]

    @property
    def raw(self) -> Any:
        return self

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        pass

    def list_topics(self, topic: str, timeout: float = -1) -> None:
        pass

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        pass


def test_an_input_nothing_was_read_from_yet_keeps_the_offset_it_was_assigned() -> None:
    inputs = Inputs(plan_node(SPEC, "n2").inputs, 0, 0)
    consumer = FakeConsumer()
    topic = inputs.ports[0].topic
    inputs.open(consumer, {topic: 1234})  # type: ignore[arg-type]
    assert inputs.positions() == {topic: 1234}, "a restart image must not send the input back to its start"
    consumer.read[topic] = 1300
    assert inputs.positions() == {topic: 1300}


def test_after_a_switch_the_new_topic_is_where_it_was_assigned_until_read(monkeypatch: Any) -> None:
    inputs = Inputs(plan_node(SPEC, "n2").inputs, 0, 0)
    consumer = FakeConsumer()
    port = inputs.ports[0]
    inputs.open(consumer, {port.topic: 10})  # type: ignore[arg-type]

    monitor = FakeMonitor({("n1", 0, 0): NodeState.FAILED})
    monkeypatch.setattr(ports, "seek_after_stable", lambda *a: (77, 0))  # where the seek finds the last stable id
    moved = inputs.follow_best(monitor, "unused")  # type: ignore[arg-type]
    assert moved == [(port, Move.STABLE)] and port.replica == 1
    assert inputs.positions() == {port.topic: 77}


def test_a_gap_is_read_again_from_each_live_replica_then_reported_as_lost() -> None:
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    port.last_stable = 9
    port.report_gap(12)
    assert port.gap == 10 and port.gaps == 1

    monitor = FakeMonitor({("n1", 0, 1): NodeState.UPSTREAM_FAILURE})
    assert port.gap_replica(monitor) == 1  # type: ignore[arg-type]
    port.replica = 1  # moved there; the gap is still there
    port.report_gap(12)
    assert port.gaps == 1, "the same gap is not counted twice"
    with pytest.raises(InputGapError, match="stable tuple 10 is missing from every replica"):
        port.gap_replica(FakeMonitor({("n1", 0, 0): NodeState.FAILED, ("n1", 0, 1): NodeState.FAILED}))  # type: ignore[arg-type]


def test_a_port_leaves_a_replica_whose_output_lags_its_partners_by_more_than_the_failure_timeout() -> None:
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    monitor = FakeMonitor()
    monitor.bounds = {("n1", 0, 0): 10_000, ("n1", 0, 1): 10_900}
    assert port.next_move(monitor) is None, "a partner a little ahead is no reason to move"  # type: ignore[arg-type]
    monitor.bounds[("n1", 0, 1)] = 11_100  # replica 0 is now 1.1 s of stream time behind, over the 1 s timeout
    assert port.next_move(monitor) == (Move.STABLE, 1)  # type: ignore[arg-type]
    monitor.known[("n1", 0, 1)] = NodeState.UPSTREAM_FAILURE
    assert port.next_move(monitor) is None, "the state ranks first: a stable replica beats a faster tentative one"  # type: ignore[arg-type]


def test_a_recovering_replica_ranks_below_one_producing_tentative_results() -> None:
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    monitor = FakeMonitor({("n1", 0, 0): NodeState.RECOVERING, ("n1", 0, 1): NodeState.UPSTREAM_FAILURE})
    assert port.next_move(monitor) == (Move.TENTATIVE, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("now", "fresh", "states", "want"),
    [
        (0, None, ("STABLE", "STABLE"), None),
        (0, None, ("FAILED", "STABLE"), (Move.STABLE, 1)),  # rules 1 and 2
        (0, None, ("FAILED", "UPSTREAM_FAILURE"), (Move.TENTATIVE, 1)),  # rule 3
        (0, None, ("UPSTREAM_FAILURE", "STABLE"), (Move.STABLE, 1)),
        (0, None, ("STABILIZATION", "UPSTREAM_FAILURE"), (Move.FRESH, 1)),  # rule 4
        (0, None, ("STABILIZATION", "STABLE"), (Move.STABLE, 1)),
        (0, 1, ("STABILIZATION", "UPSTREAM_FAILURE"), None),  # corrections from 0, new tuples from 1
        (0, 1, ("FAILED", "UPSTREAM_FAILURE"), (Move.PROMOTE, 1)),
        (0, 1, ("STABLE", "UPSTREAM_FAILURE"), (Move.END_FRESH, 1)),  # reconciled
        (0, 1, ("STABILIZATION", "STABLE"), (Move.END_FRESH, 1)),  # then rule 2 to the stable one
        (0, 1, ("STABILIZATION", "STABILIZATION"), (Move.END_FRESH, 1)),
    ],
)
def test_the_switching_rules(now: int, fresh: int | None, states: tuple[str, str], want: tuple | None) -> None:
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    port.replica, port.fresh = now, fresh
    monitor = FakeMonitor({("n1", 0, r): NodeState[s] for r, s in enumerate(states)})
    assert port.next_move(monitor) == want  # type: ignore[arg-type]


class HeldSeeks:
    """An executor whose seeks finish when the test says so."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.futures: list[Future[Any]] = []

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        self.calls.append(args)
        self.futures.append(Future())
        return self.futures[-1]


def test_a_move_waits_for_its_seek_while_the_reader_goes_on_and_is_dropped_if_the_states_change(
    monkeypatch: Any,
) -> None:
    seeks = HeldSeeks()
    monkeypatch.setattr(ports, "SEEKS", seeks)
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    port.last_stable = 41
    monitor = FakeMonitor({("n1", 0, 0): NodeState.UPSTREAM_FAILURE})
    assert port.plan(monitor, "b", None) is None  # type: ignore[arg-type]
    assert port.plan(monitor, "b", None) is None, "still seeking: the reader goes on where it is"  # type: ignore[arg-type]
    assert len(seeks.calls) == 1 and seeks.calls[0][1:] == (port.topics[1], 41, None)
    seeks.futures[0].set_result((500, 3))
    assert port.plan(monitor, "b", None) == (Move.STABLE, 1, (500, 3))  # type: ignore[arg-type]
    assert port.pending is None

    # The replica sought fails before its seek ends: the move is decided again.
    port.replica = 1
    monitor.known[("n1", 0, 0)] = NodeState.STABLE
    monitor.known[("n1", 0, 1)] = NodeState.FAILED
    assert port.plan(monitor, "b", None) is None  # type: ignore[arg-type]
    monitor.known[("n1", 0, 0)] = NodeState.FAILED
    monitor.known[("n1", 0, 1)] = NodeState.STABLE
    seeks.futures[-1].set_result((9, 0))
    assert port.plan(monitor, "b", None) is None and port.pending is None  # type: ignore[arg-type]


def test_a_replica_whose_rec_done_was_read_is_not_left_for_its_stabilization_heartbeat() -> None:
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    monitor = FakeMonitor({("n1", 0, 0): NodeState.STABILIZATION})
    assert port.next_move(monitor) == (Move.STABLE, 1)  # type: ignore[arg-type]
    port.control(REC_DONE)  # its corrections are all read: its stream goes on stably
    assert port.next_move(monitor) is None  # type: ignore[arg-type]
    port.control(UNDO)  # it reconciles again
    assert port.next_move(monitor) == (Move.STABLE, 1)  # type: ignore[arg-type]
    port.control(REC_DONE)
    monitor.known[("n1", 0, 0)] = NodeState.STABLE  # the heartbeats caught up
    assert port.next_move(monitor) is None and not port.corrected  # type: ignore[arg-type]
