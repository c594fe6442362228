"""Elections whose epochs are claimed on Kafka: two steps, the claim off the coordinator's event loop
(ha-review D5), the claims of several partitions side by side, and a stale or hung claim elected again."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any

from services.control.messages import now_ms
from services.control.states import Role
from services.coordinator.takeover import CLAIM_S, Order, Takeovers
from services.coordinator.wiring.takeovers import _Claims

D = 0.25  # detection time


def claiming(partitions: int = 1, replicas: int = 2, now: float = 0.0) -> Takeovers:
    t = Takeovers({"n": (replicas, 5.0 if now else D)}, claims=True)
    for part in range(partitions):
        for r in range(replicas):
            t.heard("n", part, r, now)
    return t


def appointed(t: Takeovers, epoch: int) -> None:
    """Replica 0 is primary at ``epoch`` (time 0)."""
    t.check(0.0)
    t.claimed(t.take_elections()[0], epoch, 0.0)


def test_an_election_gives_its_orders_once_its_epoch_is_claimed() -> None:
    t = claiming()
    assert t.check(0.0) == []  # chosen, not yet appointed: no epoch yet
    (e,) = t.take_elections()
    assert (e.node, e.partition, e.replica) == ("n", 0, 0) and t.take_elections() == []
    assert t.check(0.05) == [] and t.take_elections() == []  # one election at a time
    assert t.claimed(e, 1001, 0.1) == [Order("n", 0, 0, Role.PRIMARY, 1001), Order("n", 0, 1, Role.SECONDARY, 1001)]
    assert t.epoch("n", 0) == 1001 and t.claimed(e, 1002, 0.1) == []  # answered once


def test_the_partitions_elect_side_by_side_and_claims_come_back_in_any_order() -> None:
    t = claiming(partitions=2)
    t.check(0.0)
    e0, e1 = sorted(t.take_elections(), key=lambda e: e.partition)
    assert t.claimed(e1, 7, 0.1)[0] == Order("n", 1, 0, Role.PRIMARY, 7)
    assert t.claimed(e0, 8, 0.1)[0] == Order("n", 0, 0, Role.PRIMARY, 8)


def test_a_claim_for_a_replica_failed_meanwhile_appoints_no_one() -> None:
    t = claiming(replicas=3)
    appointed(t, 5)
    for now in (0.15, 0.3):
        t.heard("n", 0, 1, now)
        t.heard("n", 0, 2, now)
    t.check(0.3)  # 0 failed: 1 is chosen
    (e,) = t.take_elections()
    assert e.replica == 1
    t.heard("n", 0, 2, 0.7)  # the coordinator goes on hearing 2, not 1
    t.check(0.7)  # 1 is failed
    assert t.claimed(e, 9, 0.7) == [] and t.role("n", 0, 1) is Role.FAILED
    t.check(0.71)
    (again,) = t.take_elections()
    assert again.replica == 2 and t.claimed(again, 10, 0.72)[0] == Order("n", 0, 2, Role.PRIMARY, 10)


def test_a_claim_slower_than_the_detection_time_still_appoints() -> None:
    """A loaded machine: the claim comes back after several detection times, the replica unheard
    meanwhile only because the coordinator heard nothing at all."""
    t = claiming()
    appointed(t, 5)
    t.heard("n", 0, 1, 0.3)
    t.check(0.3)
    (e,) = t.take_elections()
    t.check(0.9)  # nothing read since 0.3: the silence is the coordinator's
    assert t.claimed(e, 9, 1.2)[0] == Order("n", 0, 1, Role.PRIMARY, 9)


def test_its_own_heartbeats_read_late_fail_no_one_and_elect_no_one() -> None:
    """A coordinator that reads its own heartbeat a detection time after it sent it (just restarted, or
    loaded) reads everyone's late: it cannot tell a silent replica from its own lag."""
    t = Takeovers({"n": (2, D)})
    t.heard("n", 0, 0, 0.0, reported=(Role.PRIMARY, 5))
    t.heard("n", 0, 1, 0.0, reported=(Role.SECONDARY, 5))
    t.intake(0.5, 1.0)  # its own, read 0.5 s late; 0 not read yet
    t.heard("n", 0, 1, 1.0, reported=(Role.SECONDARY, 5), sent_at=0.5)
    assert t.check(1.0) == [] and t.role("n", 0, 0) is Role.PRIMARY
    t.intake(1.05, 1.1)
    t.heard("n", 0, 1, 1.1, reported=(Role.SECONDARY, 5), sent_at=1.05)  # caught up, and 0 is silent ...
    assert t.check(1.1) == []  # ... but what else was read late may be in the batch yet: a detection time more
    t.heard("n", 0, 1, 1.3, reported=(Role.SECONDARY, 5))
    assert t.check(1.3) == [Order("n", 0, 1, Role.PRIMARY, 6)]


def test_another_replica_read_late_holds_up_no_takeover() -> None:
    """Only the coordinator's own heartbeats read late show that its view lags; another replica's (its
    process starved, its producer behind) show that this one is slow. Taken as the coordinator's lag, a
    loaded machine's late heartbeats held up an egress's takeover for 4 s after its primary was killed."""
    t = Takeovers({"n": (2, D), "m": (2, D)})
    for node in ("n", "m"):
        for r in (0, 1):
            t.heard(node, 0, r, 0.0)
    t.check(0.0)
    for now in (0.1, 0.2, 0.3):
        t.intake(now)  # its own, on time
        t.heard("n", 0, 1, now)  # n's primary, replica 0, was killed at 0.0
        t.heard("m", 0, 1, now)
        t.heard("m", 0, 0, now, sent_at=now - 0.6)  # m's primary is read late, again and again
    assert t.check(0.3) == [Order("n", 0, 1, Role.PRIMARY, 2)]
    assert t.role("m", 0, 0) is Role.PRIMARY


def test_a_replica_read_late_has_a_detection_time_before_its_silence_counts() -> None:
    """Its heartbeats may be on their way still: it is failed only if it stays silent a detection time
    after the late one was read."""
    t = Takeovers({"n": (2, D)})
    for r in (0, 1):
        t.heard("n", 0, r, 0.0)
    t.check(0.0)
    t.heard("n", 0, 0, 0.4, sent_at=0.1)  # the primary's heartbeat, read 0.3 s late
    t.heard("n", 0, 1, 0.5)
    assert t.check(0.5) == [] and t.role("n", 0, 0) is Role.PRIMARY
    t.heard("n", 0, 1, 0.65)
    assert t.check(0.65) == [Order("n", 0, 1, Role.PRIMARY, 2)]


def test_a_failed_or_hung_claim_is_made_again_and_a_late_answer_is_dropped() -> None:
    t = claiming()
    t.check(0.0)
    (first,) = t.take_elections()
    t.unclaimed(first)
    t.check(0.1)
    (second,) = t.take_elections()
    now = 0.1 + CLAIM_S + 0.01
    for r in (0, 1):
        t.heard("n", 0, r, now)
    t.check(now)  # the second claim hangs past CLAIM_S
    (third,) = t.take_elections()
    assert t.claimed(second, 50, now) == [] and t.role("n", 0, 0) is None
    assert t.claimed(third, 51, now)[0] == Order("n", 0, 0, Role.PRIMARY, 51)


def test_an_old_primary_back_while_its_successor_is_claimed_is_not_made_primary_again() -> None:
    """Its successor's claim fences it: restored now, it would be told to lead at an epoch already gone."""
    t = claiming()
    appointed(t, 5)
    t.heard("n", 0, 1, 0.3)
    t.check(0.3)
    (e,) = t.take_elections()
    assert t.heard("n", 0, 0, 0.35, reported=(Role.PRIMARY, 5)) == [Order("n", 0, 0, Role.SECONDARY, 5)]
    assert t.claimed(e, 9, 0.4) == [Order("n", 0, 1, Role.PRIMARY, 9), Order("n", 0, 0, Role.SECONDARY, 9)]


class _Blocking:
    """A claimer whose claims return only once the event loop has run meanwhile and two claims are under way."""

    def __init__(self, loop_ran: threading.Event) -> None:
        self.loop_ran, self.both = loop_ran, threading.Barrier(2, timeout=10)

    def claim(self, node: str, partition: int, replica: int) -> int:
        assert self.loop_ran.wait(10), "the event loop stood still while an epoch was claimed"
        self.both.wait()  # raises BrokenBarrierError if the claims run one after another
        return 100 + partition


def test_claims_run_off_the_event_loop_and_beside_each_other() -> None:
    t = claiming(partitions=2, now=time.monotonic())  # the wiring appoints on the monotonic clock
    sent: list[Any] = []

    async def send(key: bytes, value: bytes) -> None:
        sent.append(key)

    async def run() -> None:
        loop_ran = threading.Event()
        coordinator: Any = SimpleNamespace(takeovers=t, control=SimpleNamespace(send=send), orders_sent=0)
        claims = _Claims(_Blocking(loop_ran))  # type: ignore[arg-type]
        t.check(time.monotonic())
        for e in t.take_elections():
            claims.start(coordinator, e)
        await asyncio.sleep(0.01)  # the loop goes on while both claims wait
        loop_ran.set()
        await asyncio.wait_for(asyncio.gather(*claims.tasks), 20)

    asyncio.run(run())
    assert (t.epoch("n", 0), t.epoch("n", 1)) == (100, 101) and len(sent) == 4


def test_an_epoch_claim_heartbeat_is_no_sign_of_the_replicas_life_or_process() -> None:
    """The coordinator's own claims come back on the heartbeat topic under the new primary's name:
    taken as its heartbeat, its process id would be the coordinator's, and a new primary slow to read
    its order would be failed as restarted. Only the takeovers' view of the intake hears it: no
    other protocol (the trims, the health, DPC's table) takes it for the replica's."""
    from services.control.messages import CLAIM_EPOCH, Heartbeat
    from services.control.states import NodeState
    from services.coordinator.wiring import HEARERS, heartbeats
    from services.coordinator.wiring import takeovers as wiring

    t = claiming(now=time.monotonic())
    coordinator: Any = SimpleNamespace(takeovers=t, caught_up=True)  # any other hearer would fail on it
    claim = Heartbeat("n", 0, 0, NodeState.RECOVERING, now_ms(), CLAIM_EPOCH, pid=999)
    asyncio.run(heartbeats.hear(coordinator, claim, HEARERS, wiring.heard_claim))
    assert 999 not in t._pairs[("n", 0)].pids.values()
    assert t.read_at > float("-inf"), "the claim shows the intake moves"
