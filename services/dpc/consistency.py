"""The consistency manager: which replica of a node may reconcile when (DPC's staggering rule), as plain code.

Replica states, failure marking and staggered grants are the coordinator's decisions;
``may_reconcile_alone`` and ``policy_while_partner_reconciles`` are the same rule as a
replica applies it without the coordinator. This module is the rule's one home.

Kept apart from faust so it is testable without Kafka. ``Coordination`` works on two
mappings (in the service, faust Tables backed by changelog topics, so a restarted
coordinator continues where it stopped):

* ``replicas``: ``"node/pX/rY"`` -> ``{node, partition, replica, state, reported, sent_ms,
  heard_ms, pid, epoch, since_ms, stable, lag}`` (``stable``: stable tuples written; ``lag``:
  input messages not processed yet). ``state`` is the state the replica reported in its last
  heartbeat, or FAILED once no heartbeat arrived for ``failure_timeout``; ``since_ms`` is
  when the state last changed. A row is written when its state, pid or epoch changes, not
  for every heartbeat: the changelog then stays short, and a restarted coordinator replays
  it in moments however long the deployment ran. The newest heartbeat's time and progress
  are kept in memory (``latest``, ``progress``).
* ``recon``: ``"node/pX/rY"`` -> ``{node, partition, replica, status, requested_ms,
  granted_ms, stagger, ctl_ms, round_ms}`` with status IDLE, PENDING (asked, waiting) or GRANTED.

Every time the coordinator judges by is its own: when a message *arrived* (``now``), never
when its sender's clock says it was sent, so a replica whose clock is off is judged like
any other. A sender's times are only compared with that same sender's (``sent_ms`` of one
process, ``round_ms`` echoed back in the GRANT).

The rule (DPC, SIGMOD 2005, "processing new tuples during reconciliation"): at most one
replica of a node partition reconciles at a time, so a partner keeps producing current
(tentative) results. A REQUEST is granted at once when no other replica of the same (node, partition)
holds a grant, or when it asks with ``stagger=false`` (the Suspend policy). Waiting requests
are granted in the order they arrived. A grant is held until that replica sends DONE, is
marked FAILED, or its lease runs out; heartbeats saying it is still in STABILIZATION renew
the lease, so a reconciliation longer than the lease keeps its turn. Every table value is replaced, never mutated in place, because a
faust Table only logs assignments to its changelog.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.control.messages import COORDINATOR, ControlKind, replica_key
from services.control.states import NodeState
from services.spec.policies import Policy

# A grant whose DONE never comes (lost, or a hung replica) is released this long after it was
# made or last renewed: a holder's heartbeats renew it while they say STABILIZATION.
LEASE_MS = 30_000

IDLE, PENDING, GRANTED = "IDLE", "PENDING", "GRANTED"
STARTING = "STARTING"  # shown for a replica not heard from yet; never a NodeState
REQUEST, GRANT, DONE = ControlKind.REQUEST, ControlKind.GRANT, ControlKind.DONE


@dataclass(frozen=True)
class Grant:
    """A GRANT the coordinator must send on the control topic."""

    node: str
    partition: int
    replica: int
    stagger: bool = True
    round_ms: int = 0  # the round of the REQUEST it answers, echoed for the replica to match

    @property
    def key(self) -> str:
        return replica_key(self.node, self.partition, self.replica)


class Coordination:
    """Replica states and the grant queue over two mappings; every method is given the time."""

    def __init__(
        self,
        replicas: MutableMapping[str, Any],
        recon: MutableMapping[str, Any],
        failure_timeout_ms: int,
        lease_ms: int = LEASE_MS,
    ) -> None:
        self.replicas = replicas
        self.recon = recon
        self.failure_timeout_ms = failure_timeout_ms
        self.lease_ms = lease_ms
        # When the newest heartbeat of each replica arrived, also for heartbeats not written to
        # the table. In memory only: after a restart the table's heard_ms stands in.
        self.latest: dict[str, int] = {}
        self.progress: dict[str, dict[str, Any]] = {}  # the newest heartbeat's sent_ms, pid, stable, lag, role
        self.backlog: set[str] = set()  # replicas heard of only in a backlog so far

    # -- heartbeats and failure detection --------------------------------------------
    def on_heartbeat(self, hb: dict[str, Any], now: int, fresh: bool = True) -> bool:
        """Record a replica's heartbeat, arrived at ``now``; returns whether the table changed.

        ``fresh`` is False for the backlog a restarted coordinator reads: such a heartbeat
        tells the state, but not that the replica lives now. It never makes a FAILED replica
        look alive, and never fails a live one either (``mark_failures`` does that, once the
        backlog is read and ``caught_up`` has given every replica in it one timeout to show
        that it lives). A replica known only from the backlog takes the state it reported.
        """
        node = hb["node"]
        if node == COORDINATOR:
            return False
        try:
            reported = NodeState(hb["state"]).value
        except ValueError:
            return False
        key = replica_key(node, hb["partition"], hb["replica"])
        cur = self.replicas.get(key)
        sent = int(hb["sent_ms"])
        pid, epoch = int(hb.get("pid", 0)), int(hb.get("epoch", 0))
        newest = self.progress.get(key) or cur
        if newest is not None and newest["pid"] == pid and sent < newest["sent_ms"]:
            return False  # older than what this process already said (a replay)
        self.progress[key] = {
            "sent_ms": sent,
            "pid": pid,
            "stable": int(hb.get("stable", 0)),
            "lag": int(hb.get("lag", 0)),
            "role": str(hb.get("role", "")),  # an HA scheme's replica: its role (its epoch is the row's)
        }
        if fresh:
            self.latest[key] = now
            r = self.recon.get(key)
            if reported == NodeState.STABILIZATION.value and r is not None and r["status"] == GRANTED:
                self.recon[key] = {**r, "granted_ms": now}  # still reconciling: the lease is renewed
        else:
            self.backlog.add(key)
        if cur is None or cur["state"] != NodeState.FAILED.value:
            state = reported  # a live replica stays live: only mark_failures declares failures
        else:
            state = reported if fresh else NodeState.FAILED.value
        changed = (
            cur is None
            or cur["state"] != state
            or cur["reported"] != reported
            or cur["pid"] != pid
            or cur["epoch"] != epoch
        )
        if not changed:
            return False  # the same news again: only the in-memory time and progress move
        since = cur["since_ms"] if cur is not None and cur["state"] == state else now
        heard = now if fresh else (cur["heard_ms"] if cur is not None else 0)
        self.replicas[key] = {
            "node": node,
            "partition": int(hb["partition"]),
            "replica": int(hb["replica"]),
            "state": state,
            "reported": reported,
            "sent_ms": sent,
            "heard_ms": heard,
            "pid": pid,
            "epoch": epoch,
            "since_ms": since,
            "stable": int(hb.get("stable", 0)),
            "lag": int(hb.get("lag", 0)),
        }
        return True

    def caught_up(self, now: int) -> None:
        """The backlog is read: a replica heard of in it counts as heard now, so failure
        detection gives it one timeout to show it lives instead of failing it at once."""
        for key in self.backlog:
            self.latest[key] = max(self.latest.get(key, 0), now)
        self.backlog.clear()

    def last_heard(self, key: str) -> int:
        """When (by this coordinator's clock, ms) the newest heartbeat of a replica arrived, 0 if never."""
        cur = self.replicas.get(key)
        return max(self.latest.get(key, 0), cur["heard_ms"] if cur is not None else 0)

    def state_of(self, key: str) -> str | None:
        cur = self.replicas.get(key)
        return None if cur is None else cur["state"]

    def mark_failures(self, now: int) -> list[str]:
        """Mark replicas silent for longer than the failure timeout FAILED; returns their keys.

        A replica that fails gives up its grant and its waiting request: a restarted process
        has lost that state and asks again.
        """
        failed = []
        for key, cur in list(self.replicas.items()):
            if cur["state"] != NodeState.FAILED.value and now - self.last_heard(key) > self.failure_timeout_ms:
                self.replicas[key] = {**cur, "state": NodeState.FAILED.value, "since_ms": now}
                failed.append(key)
        for key in failed:
            r = self.recon.get(key)
            if r is not None and r["status"] != IDLE:
                self.recon[key] = {**r, "status": IDLE, "released": "failed", "released_ms": now}
        return failed

    # -- reconciliation grants -------------------------------------------------------
    def on_control(self, msg: dict[str, Any], now: int) -> list[Grant]:
        """Apply a REQUEST or DONE from a replica; returns the GRANTs to send.

        Messages older than the last one applied for that replica (``sent_ms``, compared with
        that replica's own earlier messages) are replays after a restart and change nothing.
        Requests queue in the order they arrived. A REQUEST from a replica that already holds
        a grant re-sends the GRANT (the first may have been lost), for the round it names; one
        still waiting keeps its place in the queue.
        """
        kind, node = msg["kind"], msg["node"]
        if kind not in (REQUEST, DONE) or node == COORDINATOR:
            return []  # our own GRANTs come back on the same topic
        partition, replica = int(msg["partition"]), int(msg["replica"])
        key = replica_key(node, partition, replica)
        sent = int(msg["sent_ms"])
        cur = self.recon.get(key) or {
            "node": node,
            "partition": partition,
            "replica": replica,
            "status": IDLE,
            "requested_ms": 0,
            "granted_ms": 0,
            "stagger": True,
            "ctl_ms": 0,
            "round_ms": 0,
        }
        if sent < cur["ctl_ms"]:
            return []
        stagger = bool(msg.get("stagger", True))
        round_ms = int(msg.get("round_ms", 0))
        if kind == DONE:
            if round_ms and cur.get("round_ms") and round_ms != cur["round_ms"]:
                return []  # gives back a grant of an older round: the current one stands
            self.recon[key] = {**cur, "status": IDLE, "ctl_ms": sent, "released": "done", "released_ms": now}
            return self.decide(node, partition, now)
        if cur["status"] == GRANTED:
            self.recon[key] = {**cur, "ctl_ms": sent, "round_ms": round_ms}
            return [Grant(node, partition, replica, cur["stagger"], round_ms)] + self.decide(node, partition, now)
        if cur["status"] == PENDING:
            self.recon[key] = {**cur, "ctl_ms": sent, "stagger": stagger, "round_ms": round_ms}
        else:
            self.recon[key] = {
                **cur,
                "status": PENDING,
                "requested_ms": now,
                "ctl_ms": sent,
                "stagger": stagger,
                "round_ms": round_ms,
                "released": None,
            }
        return self.decide(node, partition, now)

    def expire_leases(self, now: int) -> list[str]:
        """Release grants held longer than the lease; returns their keys."""
        out = []
        for key, r in list(self.recon.items()):
            if r["status"] == GRANTED and now - r["granted_ms"] > self.lease_ms:
                self.recon[key] = {**r, "status": IDLE, "released": "lease expired", "released_ms": now}
                out.append(key)
        return out

    def decide(self, node: str, partition: int, now: int) -> list[Grant]:
        """Grant what may be granted for one node partition, oldest request first."""
        group = [(k, r) for k, r in list(self.recon.items()) if r["node"] == node and r["partition"] == partition]
        held = any(r["status"] == GRANTED for _, r in group)
        waiting = sorted((r["requested_ms"], r["replica"], k) for k, r in group if r["status"] == PENDING)
        out = []
        for _, _, key in waiting:
            r = self.recon[key]
            if self.state_of(key) == NodeState.FAILED.value:
                continue  # granted once its heartbeats resume
            if r["stagger"] and held:
                continue
            self.recon[key] = {**r, "status": GRANTED, "granted_ms": now}
            held = True
            out.append(Grant(node, partition, r["replica"], r["stagger"], r.get("round_ms", 0)))
        return out

    def decide_all(self, now: int) -> list[Grant]:
        groups = sorted({(r["node"], r["partition"]) for r in list(self.recon.values()) if r["status"] == PENDING})
        return [g for node, p in groups for g in self.decide(node, p, now)]

    def tick(self, now: int, detect: bool = True) -> list[Grant]:
        """The periodic pass: mark failures (unless ``detect`` is off), expire leases, grant."""
        if detect:
            self.mark_failures(now)
        self.expire_leases(now)
        return self.decide_all(now)

    # -- views -----------------------------------------------------------------------
    def status(self, now: int, expected: Sequence[tuple[str, int, int]] = ()) -> dict[str, Any]:
        """Every replica's state and age, the waiting requests and the grants held (JSON-ready).

        ``expected`` lists (node, partition, replica) the spec deploys; those never heard of
        are shown STARTING with ``seen`` false: not failed, since they never ran as far as we
        know (a state for display only; replica choice never sees it).
        """
        recon = dict(self.recon.items())
        rows = {}
        for key, row in list(self.replicas.items()):
            heard = self.last_heard(key)
            rows[key] = _replica_row(key, {**row, **self.progress.get(key, {})}, max(0, now - heard))
        for node, p, rep in expected:
            key = replica_key(node, p, rep)
            rows.setdefault(key, _starting_row(key, node, p, rep))
        for key, row in rows.items():
            row["reconciliation"] = recon.get(key, {}).get("status", IDLE)
        pending = [_waiting_row(k, r, now) for k, r in recon.items() if r["status"] == PENDING]
        grants = [_grant_row(k, r, now, self.lease_ms) for k, r in recon.items() if r["status"] == GRANTED]
        return {
            "now_ms": now,
            "failure_timeout_ms": self.failure_timeout_ms,
            "lease_ms": self.lease_ms,
            "replicas": sorted(rows.values(), key=lambda x: (x["node"], x["partition"], x["replica"])),
            "pending": sorted(pending, key=lambda x: (x["requested_ms"], x["key"])),
            "grants": sorted(grants, key=lambda x: x["key"]),
        }


def _replica_row(key: str, r: dict[str, Any], age_ms: int) -> dict[str, Any]:
    """A replica heard of: its table row ``r`` with its newest heartbeat's progress laid over it."""
    return {
        "key": key,
        "node": r["node"],
        "partition": r["partition"],
        "replica": r["replica"],
        "state": r["state"],
        "reported": r["reported"],
        "age_ms": age_ms,
        "sent_ms": r["sent_ms"],
        "since_ms": r["since_ms"],
        "pid": r["pid"],
        "epoch": r["epoch"],
        "stable": r.get("stable", 0),
        "lag": r.get("lag", 0),
        "role": r.get("role", ""),
        "seen": True,
    }


def _starting_row(key: str, node: str, partition: int, replica: int) -> dict[str, Any]:
    """A replica the spec deploys but never heard of: STARTING, not failed."""
    return {
        "key": key,
        "node": node,
        "partition": partition,
        "replica": replica,
        "state": STARTING,
        "reported": None,
        "age_ms": None,
        "sent_ms": None,
        "since_ms": None,
        "pid": 0,
        "epoch": 0,
        "seen": False,
    }


def _waiting_row(key: str, r: dict[str, Any], now: int) -> dict[str, Any]:
    """A REQUEST waiting for its grant, and for how long."""
    return {
        "key": key,
        "node": r["node"],
        "partition": r["partition"],
        "replica": r["replica"],
        "requested_ms": r["requested_ms"],
        "waiting_ms": max(0, now - r["requested_ms"]),
        "stagger": r["stagger"],
    }


def _grant_row(key: str, r: dict[str, Any], now: int, lease_ms: int) -> dict[str, Any]:
    """A grant held, for how long, and how long its lease has left."""
    return {
        "key": key,
        "node": r["node"],
        "partition": r["partition"],
        "replica": r["replica"],
        "granted_ms": r["granted_ms"],
        "held_ms": max(0, now - r["granted_ms"]),
        "lease_left_ms": max(0, r["granted_ms"] + lease_ms - now),
        "stagger": r["stagger"],
    }


# -- the same rule without the coordinator ----------------------------------------------


def may_reconcile_alone(replica: int, partners: list[NodeState], stagger: bool) -> bool:
    """With no coordinator, replicas take turns by replica number: reconcile once every lower-numbered
    partner is STABLE (or gone, or still recovering from a restart) and no partner reconciles. ``partners`` are the other replicas' states,
    by replica number; without staggering (Suspend) every replica may go at once."""
    if not stagger:
        return True
    if NodeState.STABILIZATION in partners:
        return False
    return all(s in (NodeState.STABLE, NodeState.FAILED, NodeState.RECOVERING) for s in partners[:replica])


def policy_while_partner_reconciles(partners: list[NodeState], stabilization: Policy, failure: Policy) -> Policy:
    """While a partner reconciles this replica produces the current results: it delays them under the
    Delay stabilization policy, and otherwise handles new input by its failure policy."""
    if NodeState.STABILIZATION in partners and stabilization is Policy.DELAY:
        return Policy.DELAY
    return failure
