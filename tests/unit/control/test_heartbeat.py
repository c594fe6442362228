"""Heartbeats follow the data path: a loop that stops making progress stops them."""

from __future__ import annotations

import time
from typing import Any

from services.control.heartbeat import HeartbeatSender
from services.control.messages import Heartbeat
from services.control.states import NodeState


class Sent:
    def __init__(self) -> None:
        self.beats: list[Heartbeat] = []

    def send(self, topic: str, value: bytes, key: Any = None, partition: int = -1) -> None:
        self.beats.append(Heartbeat.decode(value))

    def poll(self, timeout: float = 0) -> None:
        pass

    @property
    def raw(self) -> Sent:
        return self

    def flush(self, timeout: float = 30) -> int:
        return 0


def sender(stall_s: float | None) -> tuple[HeartbeatSender, Sent]:
    sent = Sent()
    hb = HeartbeatSender("unused", "hb", "n", 0, 1, 0.1, stall_s, NodeState.RECOVERING, producer=sent)
    return hb, sent


def test_heartbeats_stop_while_the_loop_makes_no_progress_and_resume_when_it_does() -> None:
    hb, _ = sender(stall_s=1.0)
    hb.tick(100.0)
    assert hb.due(100.9)
    assert not hb.due(101.2), "a loop stuck for longer than the failure timeout must look failed"
    hb.tick(101.3)
    assert hb.due(101.4)


def test_heartbeats_go_on_through_work_that_is_progress_up_to_its_limit() -> None:
    """A takeover's reads of Kafka block the loop; they are progress, not a stall, for a while."""
    hb, _ = sender(stall_s=1.0)
    t0 = hb.ticked
    with hb.working(5.0):
        assert hb.due(t0 + 3.0), "a takeover reading Kafka for longer than the stall time looked failed"
        assert not hb.due(t0 + 6.1), "work that runs past its limit is a stall"
    assert hb.due(time.monotonic()), "the work's end is progress"
    assert not hb.due(time.monotonic() + 1.5), "after it, the loop must tick again"


def test_a_sender_without_a_loop_to_watch_never_stalls() -> None:
    hb, _ = sender(stall_s=None)
    assert hb.due(hb.ticked + 3600)


def test_a_heartbeat_carries_the_state_and_how_far_the_output_has_come() -> None:
    hb, sent = sender(stall_s=1.0)
    hb.report(stable=120, boundary_ms=45_000, lag=7)
    hb.beat()
    b = sent.beats[-1]
    assert (b.state, b.stable, b.boundary_ms, b.lag) == (NodeState.RECOVERING, 120, 45_000, 7)
