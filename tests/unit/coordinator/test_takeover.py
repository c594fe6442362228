"""The coordinator's takeover decisions for HA-scheme nodes: detection, epoch bump, rejoin as secondary."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.control.states import Role
from services.coordinator.takeover import Order, Takeovers

D = 0.25  # detection time


def pair() -> Takeovers:
    return Takeovers({"n": (2, D)})


def started(t: Takeovers, now: float = 0.0) -> list[Order]:
    t.heard("n", 0, 1, now)
    t.heard("n", 0, 0, now)
    return t.check(now)


def test_replica_0_is_elected_once_both_are_heard_and_the_other_is_secondary() -> None:
    t = pair()
    t.heard("n", 0, 1, 0.0)
    assert t.check(0.05) == []  # replica 0 may still come
    t.heard("n", 0, 0, 0.06)
    assert t.check(0.07) == [Order("n", 0, 0, Role.PRIMARY, 1), Order("n", 0, 1, Role.SECONDARY, 1)]


def test_a_lone_replica_is_elected_after_a_detection_time() -> None:
    t = pair()
    t.heard("n", 0, 1, 0.0)
    assert t.check(D - 0.01) == []
    t.heard("n", 0, 1, D - 0.01)
    assert t.check(D) == [Order("n", 0, 1, Role.PRIMARY, 1)]


def test_a_replica_that_starts_after_the_election_is_made_secondary_at_once() -> None:
    """A warm standby must follow the primary from the start: waiting for a failure would make it cold."""
    t = pair()
    t.heard("n", 0, 1, 0.0)
    t.heard("n", 0, 1, D)
    assert t.check(D) == [Order("n", 0, 1, Role.PRIMARY, 1)]
    assert t.heard("n", 0, 0, 2.0, reported=(Role.CANDIDATE, 0)) == [Order("n", 0, 0, Role.SECONDARY, 1)]
    assert t.role("n", 0, 0) is Role.SECONDARY


def test_a_silent_primary_is_replaced_by_the_secondary_with_a_new_epoch() -> None:
    t = pair()
    started(t)
    for now in (0.1, 0.2):
        t.heard("n", 0, 1, now)  # only the secondary goes on
        assert t.check(now) == []  # within the detection time: no takeover
    t.heard("n", 0, 1, 0.3)
    assert t.check(0.3) == [Order("n", 0, 1, Role.PRIMARY, 2)]
    assert t.role("n", 0, 0) is Role.FAILED and t.epoch("n", 0) == 2


def test_a_returning_primary_rejoins_as_secondary_at_the_new_epoch() -> None:
    t = pair()
    started(t)
    t.heard("n", 0, 1, 0.3)
    t.check(0.3)
    # A paused primary wakes up, or a restarted one starts: it is now the secondary.
    assert t.heard("n", 0, 0, 0.5, reported=(Role.PRIMARY, 1)) == [Order("n", 0, 0, Role.SECONDARY, 2)]
    assert t.role("n", 0, 1) is Role.PRIMARY


def test_a_failed_secondary_changes_nothing_for_the_primary() -> None:
    t = pair()
    started(t)
    t.heard("n", 0, 0, 0.3)
    assert t.check(0.3) == []
    assert t.role("n", 0, 1) is Role.FAILED and t.role("n", 0, 0) is Role.PRIMARY and t.epoch("n", 0) == 1


def test_after_both_failed_the_first_to_return_leads() -> None:
    t = pair()
    started(t)
    t.intake(0.3)  # the coordinator's own heartbeat: it reads, the replicas are silent
    assert t.check(0.3) == []  # no one left to take over
    t.heard("n", 0, 1, 1.0)  # its order: secondary (it was failed) ...
    assert t.check(1.0) == [Order("n", 0, 1, Role.PRIMARY, 2)]  # ... then elected, since no primary lives


def test_a_replica_that_reports_another_role_gets_its_order_again_once_per_detection_time() -> None:
    t = pair()
    started(t)
    assert t.heard("n", 0, 1, 0.1, reported=(Role.SECONDARY, 0)) == []  # its order may still be on its way
    assert t.heard("n", 0, 1, 0.3, reported=(Role.SECONDARY, 0)) == [Order("n", 0, 1, Role.SECONDARY, 1)]
    assert t.heard("n", 0, 1, 0.4, reported=(Role.SECONDARY, 0)) == []
    assert t.heard("n", 0, 1, 0.5, reported=(Role.SECONDARY, 1)) == []


def test_nodes_of_other_schemes_are_not_tracked() -> None:
    t = pair()
    assert t.heard("dpc_node", 0, 0, 0.0) == []
    assert t.check(1.0) == [] and t.role("dpc_node", 0, 0) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, None]), st.floats(0.01, 0.4)), min_size=1, max_size=60))
def test_never_two_primaries_and_the_epoch_only_grows(events: list[tuple[int | None, float]]) -> None:
    """Random heartbeats and silences: at most one primary per partition, each at a higher epoch than the last."""
    t, now, epochs = pair(), 0.0, [0]
    for who, dt in events:
        now += dt
        if who is not None:
            t.heard("n", 0, who, now)
        for o in t.check(now):
            if o.role is Role.PRIMARY:
                assert o.epoch > epochs[-1]
                epochs.append(o.epoch)
        assert sum(t.role("n", 0, r) is Role.PRIMARY for r in (0, 1)) <= 1


def test_a_restarted_coordinator_keeps_the_roles_the_replicas_report() -> None:
    t = pair()
    assert t.heard("n", 0, 1, 0.0, reported=(Role.SECONDARY, 5)) == []
    assert t.heard("n", 0, 0, 0.0, reported=(Role.PRIMARY, 5)) == []
    assert t.check(0.1) == []  # no election: there is a primary
    assert (t.role("n", 0, 0), t.role("n", 0, 1), t.epoch("n", 0)) == (Role.PRIMARY, Role.SECONDARY, 5)


def test_of_two_replicas_reporting_primary_the_newer_epoch_keeps_it() -> None:
    t = pair()
    t.heard("n", 0, 0, 0.0, reported=(Role.PRIMARY, 5))  # woke up after a takeover it missed
    assert t.heard("n", 0, 1, 0.0, reported=(Role.PRIMARY, 6)) == []
    assert t.role("n", 0, 1) is Role.PRIMARY and t.role("n", 0, 0) is Role.SECONDARY
    assert t.heard("n", 0, 0, 0.5, reported=(Role.PRIMARY, 5)) == [Order("n", 0, 0, Role.SECONDARY, 6)]


def test_a_primary_restarted_within_the_detection_time_is_failed_over() -> None:
    """A kill -9 and a quick restart never fall silent for a detection time: the new process says it
    is a candidate, so what the old one held is gone and the role goes to the secondary."""
    t = pair()
    started(t)
    assert t.heard("n", 0, 0, 0.1, reported=(Role.CANDIDATE, 0)) == []  # its order may still be on the way
    orders = t.heard("n", 0, 0, 0.4, reported=(Role.CANDIDATE, 0))
    assert orders == [Order("n", 0, 0, Role.SECONDARY, 1)]
    t.heard("n", 0, 1, 0.4)
    assert t.check(0.4) == [Order("n", 0, 1, Role.PRIMARY, 2), Order("n", 0, 0, Role.SECONDARY, 2)]


def test_a_new_primary_slower_than_the_detection_time_with_no_one_to_replace_it_stays_primary() -> None:
    """A takeover's reads held the new primary's heartbeats past the detection time while the old
    primary was dead: demoting it (and electing it again at a new epoch) stopped it, with no one left."""
    t = pair()
    started(t)
    t.heard("n", 0, 1, 0.3)
    assert t.check(0.3) == [Order("n", 0, 1, Role.PRIMARY, 2)]  # replica 0 died
    t.intake(0.55)  # the coordinator reads heartbeats (its own): replica 1 alone is silent
    assert t.check(0.6) == []  # replica 1 is busy taking over: silent, failed, and no one is left
    assert t.role("n", 0, 1) is Role.FAILED
    assert t.heard("n", 0, 1, 0.9, reported=(Role.PRIMARY, 2)) == [Order("n", 0, 1, Role.PRIMARY, 2)]
    assert t.check(0.9) == [] and t.role("n", 0, 1) is Role.PRIMARY and t.epoch("n", 0) == 2


def test_a_slow_primary_replaced_meanwhile_rejoins_as_secondary() -> None:
    t = Takeovers({"n": (3, D)})
    for r in (0, 1, 2):
        t.heard("n", 0, r, 0.0)
    t.check(0.0)
    t.heard("n", 0, 1, 0.3)
    t.heard("n", 0, 2, 0.3)
    assert t.check(0.3)[0] == Order("n", 0, 1, Role.PRIMARY, 2)
    t.heard("n", 0, 2, 0.6)
    assert t.check(0.6)[0] == Order("n", 0, 2, Role.PRIMARY, 3)  # replica 1 fell silent: 2 took over
    assert t.heard("n", 0, 1, 0.9, reported=(Role.PRIMARY, 2)) == [Order("n", 0, 1, Role.SECONDARY, 3)]


def test_no_replica_is_failed_while_the_coordinator_reads_no_heartbeat_at_all() -> None:
    """Every replica silent at once for a detection time is the coordinator's own stall (its reading
    of the heartbeat topic fell behind on a loaded machine): failing them all began a storm of
    takeovers, each primary replaced as soon as elected."""
    t = pair()
    started(t)
    assert t.check(0.4) == [] and t.role("n", 0, 0) is Role.PRIMARY and t.role("n", 0, 1) is Role.SECONDARY
    t.heard("n", 0, 1, 0.5)  # the late heartbeats come in: the secondary's, not the primary's
    assert t.check(0.5) == [Order("n", 0, 1, Role.PRIMARY, 2)]  # now the primary's silence means it failed


def test_a_report_sent_before_its_order_and_read_late_demotes_no_one() -> None:
    """A candidate's heartbeat sent before its order, read after a detection time (the coordinator's
    reading lagged), looked like a restart: the new primary was demoted as soon as elected."""
    t = pair()
    started(t)  # replica 0 is given the primary's role at 0.0
    t.heard("n", 0, 1, 0.35)
    assert t.heard("n", 0, 0, 0.4, reported=(Role.CANDIDATE, 0), sent_at=-0.01) == []
    assert t.role("n", 0, 0) is Role.PRIMARY
    # the same report sent after the order: a restart, whose state is gone
    assert t.heard("n", 0, 0, 0.45, reported=(Role.CANDIDATE, 0), sent_at=0.44) == [Order("n", 0, 0, Role.SECONDARY, 1)]


def test_a_new_primary_slow_to_read_its_order_is_told_again_not_demoted() -> None:
    """Seen on a loaded machine: a replica elected primary still said "candidate" a detection time
    after its order (it had not read it yet) and was demoted within half a second of its start, then
    exited when it read both orders. The same process saying so has not restarted: it is told again.
    Another process (a restart) has lost what the old one held: it is failed over."""
    t = pair()
    t.heard("n", 0, 0, 0.0, reported=(Role.CANDIDATE, 0), pid=100)
    t.heard("n", 0, 1, 0.0, reported=(Role.CANDIDATE, 0), pid=200)
    assert t.check(D)[0] == Order("n", 0, 0, Role.PRIMARY, 1)
    late = D + D + 0.05
    assert t.heard("n", 0, 0, late, reported=(Role.CANDIDATE, 0), sent_at=late, pid=100) == [
        Order("n", 0, 0, Role.PRIMARY, 1)
    ]
    assert t.role("n", 0, 0) is Role.PRIMARY
    later = late + D + 0.05
    assert t.heard("n", 0, 0, later, reported=(Role.CANDIDATE, 0), sent_at=later, pid=101) == [
        Order("n", 0, 0, Role.SECONDARY, 1)
    ]


def test_the_election_prefers_a_secondary_that_has_caught_up() -> None:
    """ha-review D13: an active standby secondary still rebuilding after it joined is in its window of
    vulnerability; the one that has caught up takes over, though it became secondary later."""
    t = Takeovers({"n": (3, D)})
    for r in (0, 1, 2):
        t.heard("n", 0, r, 0.0)
    assert t.check(0.0)[0] == Order("n", 0, 0, Role.PRIMARY, 1)
    t.heard("n", 0, 1, 0.3, catching_up=True)  # secondary as long as 2, lower-numbered, but rebuilding
    t.heard("n", 0, 2, 0.3)
    assert t.check(0.3)[0] == Order("n", 0, 2, Role.PRIMARY, 2)  # 0 fell silent
    assert t.role("n", 0, 1) is Role.SECONDARY


def test_health_counts_takeovers_their_time_and_the_live_replicas() -> None:
    """What /metrics and the status page show: a partition with one live replica is vulnerable, and a
    takeover's time runs from the old primary's last heartbeat to the new one's caught-up report."""
    t = pair()
    started(t)
    assert t.takeovers == 0 and t.health(0.0) == [{"node": "n", "partition": 0, "live": 2, "takeover_s": None}]
    t.heard("n", 0, 1, 0.3)
    assert t.check(0.3) == [Order("n", 0, 1, Role.PRIMARY, 2)]  # 0 last heard at 0.0
    assert t.takeovers == 1 and t.health(0.3)[0]["live"] == 1
    t.heard("n", 0, 1, 0.5, reported=(Role.PRIMARY, 2), catching_up=True)  # replaying
    assert t.health(0.5)[0]["takeover_s"] is None
    t.heard("n", 0, 1, 0.7, reported=(Role.PRIMARY, 2))
    assert t.health(0.7)[0]["takeover_s"] == 0.7


def test_a_backlog_read_in_send_order_fails_no_one_for_the_coordinators_own_lag() -> None:
    """HA schedule seed 12: a coordinator held up (woken from a pause, a loaded machine) reads the
    heartbeats behind it in the order sent. Midway, the newest one read was sent less than a
    detection time ago, so its view counts as current; judged at the clock, the primary, whose next
    heartbeat lay further in the backlog, looked silent, and every partition was elected again.
    Judged at the newest heartbeat read, no one is; a replica that really stopped still is."""
    t = Takeovers({"n": (2, 0.6)})  # keep-alives every 0.2 s
    for k in range(6):
        now = 0.2 * k
        t.heard("n", 0, 0, now, reported=(Role.PRIMARY, 1) if k else None)
        t.heard("n", 0, 1, now, reported=(Role.SECONDARY, 1) if k else None)
        t.check(now)
    assert t.role("n", 0, 0) is Role.PRIMARY
    t.heard("n", 0, 1, 1.65, reported=(Role.SECONDARY, 1), sent_at=1.2)  # held up from 1.0 to 1.65
    assert t.check(1.65) == [] and t.role("n", 0, 0) is Role.PRIMARY  # 0's heartbeat of 1.2 is next
    for sent in (1.4, 1.6, 1.8):  # read on time from here on; 0 had stopped after 1.0
        t.heard("n", 0, 1, sent + 0.01, reported=(Role.SECONDARY, 1), sent_at=sent)
    assert t.check(1.81)[0] == Order("n", 0, 1, Role.PRIMARY, 2)


def test_a_failed_replica_that_says_candidate_from_the_same_process_is_made_secondary() -> None:
    """A process failed over while it stood still wakes up and starts over as a candidate (an egress that
    steps down may): it is made a secondary of the new epoch, not told again the role it had in the
    table, "failed", which no replica acts on (it would say candidate, and be told "failed", forever)."""
    t = pair()
    t.heard("n", 0, 0, 0.0, reported=(Role.CANDIDATE, 0), pid=100)
    t.heard("n", 0, 1, 0.0, reported=(Role.CANDIDATE, 0), pid=200)
    assert t.check(D)[0] == Order("n", 0, 0, Role.PRIMARY, 1)
    t.heard("n", 0, 1, 0.6, reported=(Role.SECONDARY, 1), pid=200)
    assert t.check(0.6)[0] == Order("n", 0, 1, Role.PRIMARY, 2)  # 0 stood still
    assert t.role("n", 0, 0) is Role.FAILED
    assert t.heard("n", 0, 0, 0.7, reported=(Role.CANDIDATE, 0), pid=100) == [Order("n", 0, 0, Role.SECONDARY, 2)]
