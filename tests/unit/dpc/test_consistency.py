"""The coordinator's decisions without Kafka: failure marking and staggered reconciliation grants.

``Coordination`` runs here on plain dicts, the same code the faust app runs on its tables.
The property test drives random message sequences and checks DPC's staggering invariant: a
staggered grant is never held by two replicas of one node partition at once.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.dpc.consistency import DONE, GRANTED, IDLE, PENDING, REQUEST, Coordination, Grant

TIMEOUT = 1000
LEASE = 30_000


def make(lease: int = LEASE) -> tuple[Coordination, dict, dict]:
    replicas: dict = {}
    recon: dict = {}
    return Coordination(replicas, recon, TIMEOUT, lease), replicas, recon


def hb(node: str, replica: int, sent: int, state: str = "STABLE", partition: int = 0, pid: int = 100) -> dict:
    return {
        "node": node,
        "partition": partition,
        "replica": replica,
        "state": state,
        "epoch": 0,
        "sent_ms": sent,
        "pid": pid,
    }


def ctl(kind: str, node: str, replica: int, sent: int, stagger: bool = True, partition: int = 0) -> dict:
    return {"kind": kind, "node": node, "partition": partition, "replica": replica, "stagger": stagger, "sent_ms": sent}


# -- heartbeats and failure marking ----------------------------------------------------------


def test_heartbeat_records_state_and_since() -> None:
    c, replicas, _ = make()
    assert c.on_heartbeat(hb("n", 0, 1000), now=1000)
    assert replicas["n/p0/r0"] == {
        "node": "n",
        "partition": 0,
        "replica": 0,
        "state": "STABLE",
        "reported": "STABLE",
        "sent_ms": 1000,
        "heard_ms": 1000,
        "pid": 100,
        "epoch": 0,
        "since_ms": 1000,
        "stable": 0,
        "lag": 0,
    }
    c.on_heartbeat(hb("n", 0, 1200), now=1200)
    assert replicas["n/p0/r0"]["since_ms"] == 1000  # same state: since does not move
    c.on_heartbeat(hb("n", 0, 1400, "UPSTREAM_FAILURE"), now=1400)
    assert replicas["n/p0/r0"]["state"] == "UPSTREAM_FAILURE" and replicas["n/p0/r0"]["since_ms"] == 1400


def test_older_heartbeat_is_ignored() -> None:
    c, replicas, _ = make()
    c.on_heartbeat(hb("n", 0, 2000, "STABILIZATION"), now=2000)
    assert not c.on_heartbeat(hb("n", 0, 1900, "STABLE"), now=2001)
    assert replicas["n/p0/r0"]["state"] == "STABILIZATION"


def test_coordinator_and_unknown_states_are_not_replicas() -> None:
    c, replicas, _ = make()
    assert not c.on_heartbeat(hb("coordinator", 0, 1000), now=1000)
    assert not c.on_heartbeat(hb("n", 0, 1000, "DANCING"), now=1000)
    assert replicas == {}


def test_silent_replica_is_marked_failed_and_recovers() -> None:
    c, replicas, _ = make()
    c.on_heartbeat(hb("n", 0, 1000), now=1000)
    c.on_heartbeat(hb("n", 1, 1000), now=1000)
    assert c.mark_failures(now=1900) == []
    c.on_heartbeat(hb("n", 1, 1800), now=1800)
    assert c.mark_failures(now=2001) == ["n/p0/r0"]
    assert replicas["n/p0/r0"]["state"] == "FAILED" and replicas["n/p0/r0"]["since_ms"] == 2001
    assert replicas["n/p0/r0"]["reported"] == "STABLE"
    assert replicas["n/p0/r1"]["state"] == "STABLE"
    assert c.mark_failures(now=2100) == []  # marked once
    c.on_heartbeat(hb("n", 0, 2500, "UPSTREAM_FAILURE", pid=101), now=2500)
    assert replicas["n/p0/r0"]["state"] == "UPSTREAM_FAILURE" and replicas["n/p0/r0"]["pid"] == 101
    assert replicas["n/p0/r0"]["since_ms"] == 2500


def test_a_replica_heard_of_only_in_a_backlog_fails_one_timeout_after_the_backlog_is_read() -> None:
    c, replicas, _ = make()
    assert c.on_heartbeat(hb("n", 0, 1000), now=50_000, fresh=False)  # the backlog of a restarted coordinator
    assert replicas["n/p0/r0"]["state"] == "STABLE"  # what it said; whether it lives is not known yet
    assert not c.on_heartbeat(hb("n", 0, 1200), now=50_001, fresh=False)  # the same news is not rewritten
    c.caught_up(now=50_100)
    assert c.mark_failures(now=51_000) == []  # one timeout to show that it lives
    assert c.mark_failures(now=51_101) == ["n/p0/r0"]  # it did not: dead
    assert replicas["n/p0/r0"]["state"] == "FAILED" and replicas["n/p0/r0"]["since_ms"] == 51_101
    assert not c.on_heartbeat(hb("n", 0, 1300), now=51_200, fresh=False)  # a replay leaves it failed
    assert replicas["n/p0/r0"]["state"] == "FAILED"
    assert c.on_heartbeat(hb("n", 0, 1400), now=90_000)  # a fresh one brings it back
    assert replicas["n/p0/r0"]["state"] == "STABLE"


class CountingDict(dict):
    """A table that counts its writes: each is a changelog record in the service."""

    writes = 0

    def __setitem__(self, key: object, value: object) -> None:
        self.writes += 1
        super().__setitem__(key, value)


def test_steady_heartbeats_do_not_grow_the_changelog() -> None:
    """A restarted coordinator replays its changelog before it is ready: one record per heartbeat
    made that replay grow with the deployment's age (10 records a second per replica)."""
    replicas = CountingDict()
    c = Coordination(replicas, {}, TIMEOUT)
    for t in range(1000, 61_000, 100):  # a minute of two replicas in one state
        c.on_heartbeat(hb("n", 0, t) | {"stable": t, "lag": 1}, now=t)
        c.on_heartbeat(hb("n", 1, t, "UPSTREAM_FAILURE"), now=t)
        assert c.mark_failures(now=t) == []
    assert replicas.writes == 2  # each replica's first heartbeat
    row = next(r for r in c.status(now=61_000)["replicas"] if r["key"] == "n/p0/r0")
    assert (row["stable"], row["lag"], row["sent_ms"], row["age_ms"]) == (60_900, 1, 60_900, 100)  # from memory
    c.on_heartbeat(hb("n", 1, 61_000), now=61_000)  # a change is written
    assert replicas.writes == 3 and replicas["n/p0/r1"]["state"] == "STABLE"


def test_a_backlog_neither_fails_a_live_replica_nor_floods_the_table() -> None:
    """After a coordinator restart the heartbeats sent while it was down arrive late."""
    c, replicas, _ = make()
    c.on_heartbeat(hb("n", 0, 1000), now=1000)
    writes = sum(c.on_heartbeat(hb("n", 0, t), now=9000, fresh=False) for t in range(1100, 8000, 100))
    assert replicas["n/p0/r0"]["state"] == "STABLE" and replicas["n/p0/r0"]["since_ms"] == 1000
    assert writes == 0  # unchanged news, not written
    c.caught_up(now=9000)  # the backlog is read: heard of in it counts as heard now
    assert c.last_heard("n/p0/r0") == 9000
    assert c.mark_failures(now=9500) == []
    assert c.status(now=9500)["replicas"][0]["age_ms"] == 500
    assert c.on_heartbeat(hb("n", 0, 8000, "UPSTREAM_FAILURE"), now=9501, fresh=False)  # news are written even late
    assert replicas["n/p0/r0"]["state"] == "UPSTREAM_FAILURE"


@pytest.mark.parametrize("skew", [-5000, 5000])
def test_a_replica_whose_clock_is_off_is_judged_by_when_its_heartbeats_arrive(skew: int) -> None:
    c, replicas, recon = make()
    for t in range(100_000, 103_000, 100):  # r1's clock is ``skew`` ms off the coordinator's
        c.on_heartbeat(hb("n", 0, t), now=t)
        c.on_heartbeat(hb("n", 1, t + skew, "UPSTREAM_FAILURE"), now=t)
        assert c.mark_failures(now=t) == []
    assert replicas["n/p0/r1"]["state"] == "UPSTREAM_FAILURE"
    assert c.status(now=103_000)["replicas"][1]["age_ms"] == 100
    assert c.on_control(ctl(REQUEST, "n", 1, 103_000 + skew) | {"round_ms": 102_900 + skew}, now=103_000) == [
        Grant("n", 0, 1, True, 102_900 + skew)
    ], "the grant echoes the replica's own round, whatever its clock says"
    assert recon["n/p0/r1"]["requested_ms"] == 103_000  # queued by arrival


# -- grants ------------------------------------------------------------------------------------


def test_first_request_is_granted_at_once() -> None:
    c, _, recon = make()
    assert c.on_control(ctl(REQUEST, "n", 0, 100), now=100) == [Grant("n", 0, 0)]
    assert recon["n/p0/r0"]["status"] == GRANTED


def test_second_replica_waits_for_done() -> None:
    c, _, recon = make()
    c.on_control(ctl(REQUEST, "n", 0, 100), now=100)
    assert c.on_control(ctl(REQUEST, "n", 1, 110), now=110) == []
    assert recon["n/p0/r1"]["status"] == PENDING
    assert c.tick(now=500) == []
    assert c.on_control(ctl(DONE, "n", 0, 600), now=600) == [Grant("n", 0, 1)]
    assert recon["n/p0/r0"]["status"] == IDLE and recon["n/p0/r1"]["status"] == GRANTED


def test_other_partitions_and_nodes_are_independent() -> None:
    c, _, _ = make()
    assert c.on_control(ctl(REQUEST, "n", 0, 100), now=100) == [Grant("n", 0, 0)]
    assert c.on_control(ctl(REQUEST, "n", 1, 101, partition=1), now=101) == [Grant("n", 1, 1)]
    assert c.on_control(ctl(REQUEST, "m", 1, 102), now=102) == [Grant("m", 0, 1)]


def test_requests_are_granted_in_the_order_they_arrived() -> None:
    c, _, _ = make()
    c.on_control(ctl(REQUEST, "n", 0, 100), now=100)
    # r2's clock says it asked first, but r1's REQUEST arrived first: senders' clocks are not compared
    c.on_control(ctl(REQUEST, "n", 1, 130), now=131)
    c.on_control(ctl(REQUEST, "n", 2, 120), now=132)
    assert c.on_control(ctl(DONE, "n", 0, 200), now=200) == [Grant("n", 0, 1)]
    assert c.on_control(ctl(DONE, "n", 1, 300), now=300) == [Grant("n", 0, 2)]


def test_a_done_for_an_older_round_does_not_release_the_current_grant() -> None:
    c, _, recon = make()
    c.on_control(ctl(REQUEST, "n", 0, 100) | {"round_ms": 100}, now=100)
    c.on_control(ctl(REQUEST, "n", 1, 110) | {"round_ms": 110}, now=110)
    assert c.on_control(ctl(DONE, "n", 0, 150) | {"round_ms": 50}, now=150) == []
    assert recon["n/p0/r0"]["status"] == GRANTED
    assert c.on_control(ctl(DONE, "n", 0, 160) | {"round_ms": 100}, now=160) == [Grant("n", 0, 1, True, 110)]


def test_suspend_policy_grants_without_staggering() -> None:
    c, _, _ = make()
    assert c.on_control(ctl(REQUEST, "n", 0, 100, stagger=False), now=100) == [Grant("n", 0, 0, False)]
    assert c.on_control(ctl(REQUEST, "n", 1, 101, stagger=False), now=101) == [Grant("n", 0, 1, False)]


def test_repeated_request_resends_grant_and_keeps_queue_place() -> None:
    c, _, recon = make()
    c.on_control(ctl(REQUEST, "n", 0, 100), now=100)
    c.on_control(ctl(REQUEST, "n", 1, 110), now=110)
    assert c.on_control(ctl(REQUEST, "n", 0, 150), now=150) == [Grant("n", 0, 0)]
    assert recon["n/p0/r0"]["granted_ms"] == 100  # re-sending does not renew the lease
    assert c.on_control(ctl(REQUEST, "n", 1, 160), now=160) == []
    assert recon["n/p0/r1"]["requested_ms"] == 110


def test_replayed_messages_change_nothing() -> None:
    c, _, recon = make()
    c.on_control(ctl(REQUEST, "n", 0, 100), now=100)
    c.on_control(ctl(DONE, "n", 0, 200), now=200)
    # a restarted coordinator reads the REQUEST again: older than the DONE it already applied
    assert c.on_control(ctl(REQUEST, "n", 0, 100), now=300) == []
    assert recon["n/p0/r0"]["status"] == IDLE


def test_our_own_grants_are_ignored() -> None:
    c, _, recon = make()
    assert c.on_control(ctl("GRANT", "n", 0, 100), now=100) == []
    assert recon == {}


def test_failed_holder_releases_its_grant() -> None:
    c, _, recon = make()
    c.on_heartbeat(hb("n", 0, 100), now=100)
    c.on_heartbeat(hb("n", 1, 100), now=100)
    c.on_control(ctl(REQUEST, "n", 0, 100), now=100)
    c.on_control(ctl(REQUEST, "n", 1, 110), now=110)
    c.on_heartbeat(hb("n", 1, 1050), now=1050)
    assert c.tick(now=1150) == [Grant("n", 0, 1)]  # r0 silent since 100: FAILED, grant passes on
    assert recon["n/p0/r0"]["status"] == IDLE and recon["n/p0/r0"]["released"] == "failed"


def test_failed_replica_drops_its_request_and_is_not_granted() -> None:
    c, replicas, recon = make()
    c.on_heartbeat(hb("n", 0, 100), now=100)
    c.on_heartbeat(hb("n", 1, 100), now=100)
    c.on_control(ctl(REQUEST, "n", 0, 100), now=100)
    c.on_control(ctl(REQUEST, "n", 1, 110), now=110)
    c.on_heartbeat(hb("n", 0, 1050), now=1050)
    assert c.tick(now=1150) == []  # r1 failed while waiting: its request goes
    assert recon["n/p0/r1"]["status"] == IDLE
    # a request from a replica still marked FAILED waits until its heartbeats resume
    c.on_control(ctl(DONE, "n", 0, 1200), now=1200)
    assert c.on_control(ctl(REQUEST, "n", 1, 1210), now=1210) == []
    c.on_heartbeat(hb("n", 1, 1300), now=1300)
    assert replicas["n/p0/r1"]["state"] == "STABLE"
    assert c.tick(now=1310) == [Grant("n", 0, 1)]


def test_lease_expiry_releases_the_grant() -> None:
    c, _, recon = make(lease=5000)
    c.on_control(ctl(REQUEST, "n", 0, 100), now=100)
    c.on_control(ctl(REQUEST, "n", 1, 110), now=110)
    assert c.tick(now=5100, detect=False) == []
    assert c.tick(now=5101, detect=False) == [Grant("n", 0, 1)]
    assert recon["n/p0/r0"]["released"] == "lease expired"


def test_status_lists_replicas_requests_and_grants() -> None:
    c, _, _ = make()
    c.on_heartbeat(hb("n", 0, 1000), now=1000)
    c.on_control(ctl(REQUEST, "n", 0, 1000), now=1000)
    c.on_control(ctl(REQUEST, "n", 1, 1010), now=1010)
    st = c.status(now=1500, expected=[("n", 0, 0), ("n", 0, 1)])
    assert [(r["key"], r["state"], r["seen"], r["reconciliation"]) for r in st["replicas"]] == [
        ("n/p0/r0", "STABLE", True, GRANTED),
        ("n/p0/r1", "STARTING", False, PENDING),  # not heard from yet: not failed
    ]
    assert st["replicas"][0]["age_ms"] == 500
    assert [(p["key"], p["waiting_ms"]) for p in st["pending"]] == [("n/p0/r1", 490)]
    assert [(g["key"], g["held_ms"], g["lease_left_ms"]) for g in st["grants"]] == [("n/p0/r0", 500, LEASE - 500)]


def test_values_are_replaced_not_mutated() -> None:
    """A faust Table logs only assignments: every change must assign a new dict."""
    c, replicas, recon = make()
    c.on_heartbeat(hb("n", 0, 100), now=100)
    c.on_control(ctl(REQUEST, "n", 0, 100), now=100)
    before_r, before_c = replicas["n/p0/r0"], recon["n/p0/r0"]
    snap_r, snap_c = dict(before_r), dict(before_c)
    c.on_control(ctl(DONE, "n", 0, 200), now=200)
    c.mark_failures(now=5000)
    assert before_r == snap_r and before_c == snap_c
    assert replicas["n/p0/r0"] is not before_r and recon["n/p0/r0"] is not before_c


# -- the staggering invariant under random message sequences -------------------------------------

events = st.lists(
    st.tuples(
        st.sampled_from([REQUEST, DONE, "BEAT", "TICK"]), st.integers(0, 2), st.integers(0, 1), st.integers(1, 1500)
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(events)
def test_at_most_one_staggered_grant_per_node_partition(seq: list) -> None:
    c, replicas, recon = make(lease=5000)
    now = 0
    granted: set[str] = set()
    for kind, replica, partition, dt in seq:
        now += dt
        if kind == "BEAT":
            c.on_heartbeat(hb("n", replica, now, partition=partition), now)
            grants = []
        elif kind == "TICK":
            grants = c.tick(now)
        else:
            grants = c.on_control(ctl(kind, "n", replica, now, partition=partition), now)
        granted.update(g.key for g in grants)
        for p in (0, 1):
            holders = [k for k, r in recon.items() if r["partition"] == p and r["status"] == GRANTED]
            assert len(holders) <= 1, (holders, recon)
        for k, r in recon.items():
            if r["status"] == GRANTED:
                assert k in granted  # every holder was told
                assert replicas.get(k, {}).get("state") != "FAILED"
        # after a tick nobody waits while nobody of its partition holds a grant (no lost wake-up)
        for p in (0, 1) if kind == "TICK" else ():
            group = [(k, r) for k, r in recon.items() if r["partition"] == p]
            if any(r["status"] == PENDING and replicas.get(k, {}).get("state") != "FAILED" for k, r in group):
                assert any(r["status"] == GRANTED for _, r in group), recon


@pytest.mark.parametrize("stagger", [True, False])
def test_done_without_request_is_harmless(stagger: bool) -> None:
    c, _, recon = make()
    assert c.on_control(ctl(DONE, "n", 0, 100, stagger=stagger), now=100) == []
    assert recon["n/p0/r0"]["status"] == IDLE


# -- the same rule without the coordinator -----------------------------------------------------

from services.control.states import NodeState  # noqa: E402
from services.dpc.consistency import may_reconcile_alone, policy_while_partner_reconciles  # noqa: E402
from services.spec.policies import Policy  # noqa: E402

S, UF, STAB, F = NodeState.STABLE, NodeState.UPSTREAM_FAILURE, NodeState.STABILIZATION, NodeState.FAILED


def test_without_coordinator_replicas_take_turns_by_number() -> None:
    # replica 0 (partner r1 also failed over) goes first; replica 1 waits for replica 0
    assert may_reconcile_alone(0, [UF], stagger=True)
    assert not may_reconcile_alone(1, [UF], stagger=True)
    assert may_reconcile_alone(1, [S], stagger=True) and may_reconcile_alone(1, [F], stagger=True)
    assert may_reconcile_alone(1, [NodeState.RECOVERING], stagger=True), "a restarting partner does not hold the turn"
    # never while a partner reconciles, whatever the numbers
    assert not may_reconcile_alone(0, [STAB], stagger=True)
    assert not may_reconcile_alone(2, [S, STAB], stagger=True)


def test_without_staggering_everyone_may_reconcile() -> None:
    assert may_reconcile_alone(1, [STAB], stagger=False)


@given(st.lists(st.sampled_from([S, UF, STAB, F]), min_size=1, max_size=3))
def test_at_most_one_replica_of_a_node_starts_alone_at_a_time(states: list[NodeState]) -> None:
    """Among replicas that all want to reconcile (UF) with the others' states fixed, the rule lets at most one go."""
    n = len(states) + 1
    wanting = [r for r in range(n) if may_reconcile_alone(r, [UF] * r + states[r:], stagger=True)]
    assert len(wanting) <= 1


def test_partner_reconciling_switches_to_the_delay_stabilization_policy() -> None:
    assert policy_while_partner_reconciles([STAB], Policy.DELAY, Policy.PROCESS) is Policy.DELAY
    assert policy_while_partner_reconciles([S], Policy.DELAY, Policy.PROCESS) is Policy.PROCESS
    assert policy_while_partner_reconciles([STAB], Policy.PROCESS, Policy.DELAY) is Policy.DELAY
    assert policy_while_partner_reconciles([STAB], Policy.SUSPEND, Policy.PROCESS) is Policy.PROCESS


def test_a_reconciliation_longer_than_the_lease_keeps_its_turn_while_its_heartbeats_say_so() -> None:
    c, _, recon = make(lease=30_000)
    c.on_heartbeat(hb("n", 0, 0), now=0)
    c.on_heartbeat(hb("n", 1, 0), now=0)
    c.on_control(ctl(REQUEST, "n", 0, 0), now=0)
    c.on_control(ctl(REQUEST, "n", 1, 10), now=10)
    for t in range(100, 90_000, 100):  # a 90 s redo: r0 says STABILIZATION all along
        c.on_heartbeat(hb("n", 0, t, "STABILIZATION"), now=t)
        c.on_heartbeat(hb("n", 1, t, "UPSTREAM_FAILURE"), now=t)
        assert c.tick(now=t) == [], f"the partner was granted at {t} ms while r0 still reconciles"
    assert recon["n/p0/r0"]["status"] == GRANTED
    for t in range(90_000, 120_200, 100):  # done, but its DONE got lost: no more renewals
        c.on_heartbeat(hb("n", 0, t, "STABLE"), now=t)
        c.on_heartbeat(hb("n", 1, t, "UPSTREAM_FAILURE"), now=t)
    assert c.tick(now=120_101) == [Grant("n", 0, 1)], "without renewals the lease runs out"
