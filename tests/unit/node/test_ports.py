"""Input ports: what a restart image records of where each input is."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from services.control.states import NodeState
from services.core.errors import InputGapError
from services.core.tuples import REC_DONE, UNDO
from services.dpc import seeks, switching
from services.dpc.switching import Move
from services.node.ports import Inputs
from services.spec.plan import plan_node
from tests.unit.dpc.fake_node import CHAIN, FakeMonitor

SPEC = CHAIN


class FakeConsumer:
    """Knows a position only for partitions a message was read from, as librdkafka does; hands out
    the messages of ``queue`` in order."""

    def __init__(self, queue: list[str] | None = None) -> None:
        self.assigned: list[TopicPartition] = []
        self.read: dict[str, int] = {}
        self.queue = list(queue or [])
        self.now: dict[str, int] = {}  # what is assigned now, at which offset

    def poll_batch(self, max_messages: int, timeout: float) -> list[str]:
        got, self.queue = self.queue[:max_messages], self.queue[max_messages:]
        return got

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.read.get(tp.topic, -1001)) for tp in tps]

    def assign_offsets(self, tps: list[TopicPartition]) -> None:
        self.assigned = list(tps)

    def positions(self) -> list[TopicPartition]:
        return [TopicPartition(t, 0, off) for t, off in self.read.items()]

    @property
    def raw(self) -> Any:
        return self

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.now.pop(tp.topic, None)

    def list_topics(self, topic: str, timeout: float = -1) -> None:
        pass

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self.now.update({tp.topic: tp.offset for tp in tps})


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
    monkeypatch.setattr(seeks, "seek_after_stable", lambda *a: (77, 0))  # where the seek finds the last stable id
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
        (0, 1, ("STABLE", "UPSTREAM_FAILURE"), None),  # reconciled: its REC_DONE ends the fresh read
        (0, 1, ("STABLE", "STABILIZATION"), (Move.END_FRESH, 1)),  # the fresh replica gives no new tuples
        (0, 1, ("STABLE", "FAILED"), (Move.END_FRESH, 1)),
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
    monkeypatch.setattr("services.dpc.seeks.SEEKS", seeks)
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


def test_a_fresh_replica_is_read_through_a_consumer_of_its_own_and_its_tuples_come_first(monkeypatch: Any) -> None:
    """Rule 4's new tuples must not wait in one queue behind the corrections fetched before them."""
    inputs = Inputs(plan_node(SPEC, "n2").inputs, 0, 0)
    main, fresh = FakeConsumer([f"correction {i}" for i in range(5)]), FakeConsumer(["new 0", "new 1"])
    port = inputs.ports[0]
    inputs.open(main, {port.topic: 0}, fresh)  # type: ignore[arg-type]
    port.processed_tmax = 2000  # the node has processed tentative input up to this t_max
    monkeypatch.setattr(seeks, "seek_fresh", lambda *a: (40, 0))
    monitor = FakeMonitor({("n1", 0, 0): NodeState.STABILIZATION, ("n1", 0, 1): NodeState.UPSTREAM_FAILURE})
    assert inputs.follow_best(monitor, "unused") == [(port, Move.FRESH)]  # type: ignore[arg-type]
    assert fresh.now == {port.topics[1]: 40} and port.topics[1] not in main.now
    assert inputs.poll(3, 0.1) == ["new 0", "new 1", "correction 0", "correction 1", "correction 2"]
    assert inputs.poll(3, 0.1) == ["correction 3", "correction 4"]

    # The reconciling replica fails: the fresh one is followed, by the main consumer from where it was read.
    fresh.read[port.topics[1]] = 42
    monitor.known[("n1", 0, 0)] = NodeState.FAILED
    assert inputs.follow_best(monitor, "unused") == [(port, Move.PROMOTE)]  # type: ignore[arg-type]
    assert main.now == {port.topics[1]: 42} and fresh.now == {}
    assert port.replica == 1 and inputs.positions() == {port.topics[1]: 42}


def test_a_fresh_read_ends_on_its_own_consumer() -> None:
    inputs = Inputs(plan_node(SPEC, "n2").inputs, 0, 0)
    main, fresh = FakeConsumer(), FakeConsumer()
    port = inputs.ports[0]
    inputs.open(main, {port.topic: 0}, fresh)  # type: ignore[arg-type]
    port.start_fresh(fresh, "unused", 1, None, (7, 0))  # type: ignore[arg-type]
    inputs._index()
    inputs.end_fresh(port)
    assert fresh.now == {} and main.now == {} and port.fresh is None and not inputs.fresh_by_topic


def test_rule_4s_start_is_sought_ahead_while_both_replicas_are_in_a_failure(monkeypatch: Any) -> None:
    seeks = HeldSeeks()
    monkeypatch.setattr("services.dpc.seeks.SEEKS", seeks)
    monkeypatch.setattr(switching, "STANDBY_S", 0.0)
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    monitor = FakeMonitor({("n1", 0, 0): NodeState.UPSTREAM_FAILURE, ("n1", 0, 1): NodeState.UPSTREAM_FAILURE})
    assert port.plan(monitor, "b", None) is None and not seeks.calls, "it holds no tentative tuples yet"  # type: ignore[arg-type]
    assert port.plan(monitor, "b", 2000) is None  # type: ignore[arg-type]
    assert seeks.calls == [("b", port.topics[1], 2000)]
    seeks.futures[0].set_result((300, 0))
    assert port.plan(monitor, "b", 2100) is None  # type: ignore[arg-type]
    assert seeks.calls[-1] == ("b", port.topics[1], 2100), "sought again, the first result kept meanwhile"

    # The followed replica begins to reconcile: the fresh read starts at once, where the finished seek found.
    monitor.known[("n1", 0, 0)] = NodeState.STABILIZATION
    assert port.plan(monitor, "b", 2200) == (Move.FRESH, 1, (300, 0))  # type: ignore[arg-type]
    assert len(seeks.calls) == 2 and port.standby is None


def test_no_start_is_sought_ahead_when_no_partner_is_in_a_failure(monkeypatch: Any) -> None:
    seeks = HeldSeeks()
    monkeypatch.setattr("services.dpc.seeks.SEEKS", seeks)
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    for states in ((NodeState.UPSTREAM_FAILURE, NodeState.FAILED), (NodeState.STABLE, NodeState.UPSTREAM_FAILURE)):
        monitor = FakeMonitor({("n1", 0, r): s for r, s in enumerate(states)})
        port.plan(monitor, "b", 2000)  # type: ignore[arg-type]
    assert not seeks.calls and port.standby is None


def test_a_switch_to_a_partner_that_reconciled_reads_on_from_its_run_sought_ahead(monkeypatch: Any) -> None:
    seeks = HeldSeeks()
    monkeypatch.setattr("services.dpc.seeks.SEEKS", seeks)
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    port.last_stable = 41
    monitor = FakeMonitor({("n1", 0, 0): NodeState.UPSTREAM_FAILURE, ("n1", 0, 1): NodeState.UPSTREAM_FAILURE})
    port.plan(monitor, "b", 2000)  # type: ignore[arg-type]
    seeks.futures[0].set_result((300, 0))
    monitor.known[("n1", 0, 1)] = NodeState.STABLE  # n1.r1 reconciled: its UNDO is past offset 300
    assert port.plan(monitor, "b", 2000) is None  # type: ignore[arg-type]
    assert seeks.calls[-1] == ("b", port.topics[1], 41, 300)


def test_a_partner_that_begins_to_reconcile_is_followed_for_its_corrections_while_the_other_goes_on_fresh(
    monkeypatch: Any,
) -> None:
    """Rule 4 from the other side: the followed replica is in a failure and its partner begins to
    reconcile. Its corrections are read from its UNDO on (found reading on from its run, sought
    ahead), and the replica followed so far supplies new tuples from where it is read."""
    seeks = HeldSeeks()
    monkeypatch.setattr("services.dpc.seeks.SEEKS", seeks)
    inputs = Inputs(plan_node(SPEC, "n2").inputs, 0, 0)
    main, fresh = FakeConsumer(), FakeConsumer()
    port = inputs.ports[0]
    inputs.open(main, {port.topic: 0}, fresh)  # type: ignore[arg-type]
    port.last_stable = 41
    monitor = FakeMonitor({("n1", 0, 0): NodeState.UPSTREAM_FAILURE, ("n1", 0, 1): NodeState.UPSTREAM_FAILURE})
    port.processed_tmax = 2000
    assert inputs.follow_best(monitor, "b") == []  # type: ignore[arg-type]
    seeks.futures[0].set_result((300, 0))  # the standby: n1.r1's tentative run

    monitor.known[("n1", 0, 1)] = NodeState.STABILIZATION
    assert inputs.follow_best(monitor, "b") == []  # type: ignore[arg-type]
    assert seeks.calls[-1] == ("b", port.topics[1], 0, 300, 41, 5000, 1.0), "its UNDO is sought from there"
    assert inputs.follow_best(monitor, "b") == [], "still seeking: the move stands"  # type: ignore[arg-type]
    seeks.futures[-1].set_result((352, 4))
    main.read[port.topics[0]] = 120  # where n1.r0 is read now
    assert inputs.follow_best(monitor, "b") == [(port, Move.CORRECT)]  # type: ignore[arg-type]
    assert port.replica == 1 and port.fresh == 0 and port.gate.epoch == 4
    assert main.now == {port.topics[1]: 352} and fresh.now == {port.topics[0]: 120}
    assert port.skip_upto is None, "n1.r0 goes on where it is: none of its tuples is held twice"


def test_no_correction_read_without_the_partners_undo(monkeypatch: Any) -> None:
    seeks = HeldSeeks()
    monkeypatch.setattr("services.dpc.seeks.SEEKS", seeks)
    port = Inputs(plan_node(SPEC, "n2").inputs, 0, 0).ports[0]
    monitor = FakeMonitor({("n1", 0, 0): NodeState.UPSTREAM_FAILURE, ("n1", 0, 1): NodeState.UPSTREAM_FAILURE})
    port.plan(monitor, "b", 2000)  # type: ignore[arg-type]
    seeks.futures[0].set_result((300, 0))
    monitor.known[("n1", 0, 1)] = NodeState.STABILIZATION
    assert port.plan(monitor, "b", 2000) is None  # type: ignore[arg-type]
    seeks.futures[-1].set_result(None)  # something other than tentative tuples came first
    assert port.plan(monitor, "b", 2000) is None and port.replica == 0  # type: ignore[arg-type]
    assert port.next_move(monitor) is None, "it stays on the replica in a failure, as before"  # type: ignore[arg-type]


class AssignmentConsumer(FakeConsumer):
    """Keeps the assignment as librdkafka does, which refuses to unassign from an empty one."""

    def __init__(self) -> None:
        super().__init__()
        self.assignment: set[str] = set()

    def assign_offsets(self, tps: list[TopicPartition]) -> None:
        super().assign_offsets(tps)
        self.assignment = {tp.topic for tp in tps}

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        super().incremental_assign(tps)
        self.assignment |= {tp.topic for tp in tps}

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        if not self.assignment:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "Can't subtract from empty assignment"))
        super().incremental_unassign(tps)
        self.assignment -= {tp.topic for tp in tps}


def test_inputs_that_read_nothing_yet_do_not_move_until_they_start(monkeypatch: Any) -> None:
    """An HA candidate reads nothing until the coordinator's order (``Inputs.open`` without offsets).
    An upstream failure meanwhile moves no port: moving would unassign what was never assigned. Once
    the inputs start, the switching rules apply as usual."""
    inputs = Inputs(plan_node(SPEC, "n2").inputs, 0, 0)
    consumer, port = AssignmentConsumer(), inputs.ports[0]
    inputs.open(consumer, None)  # type: ignore[arg-type]
    monitor = FakeMonitor({("n1", 0, 0): NodeState.FAILED})
    monkeypatch.setattr(seeks, "seek_after_stable", lambda *a: (77, 0))
    assert inputs.follow_best(monitor, "unused") == [] and port.replica == 0  # type: ignore[arg-type]
    inputs.read_from({})
    assert inputs.follow_best(monitor, "unused") == [(port, Move.STABLE)] and port.replica == 1  # type: ignore[arg-type]
