"""An egress is a replicated service of the deployment, as a node is: the launcher runs a process per
replica partition, the coordinator keeps a primary per partition, each replica has a login with what
it reads and writes, a log it follows is never trimmed under it, and a replica writes only while it is
primary (told secondary, or fenced by a newer primary, a primary steps down and stands by)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.control.messages import RoleOrder
from services.control.states import Role
from services.coordinator.app import expected_replicas
from services.coordinator.trims import trimmable
from services.coordinator.wiring.takeovers import heartbeat_ms, takeovers_of
from services.core.errors import FencedError
from services.core.transactions import TransactionAborted
from services.deploy.access import DESCRIBE, READ, TRANSACTIONAL_ID, WRITE, Acl, egress_acls, login_key, usernames
from services.deploy.local import service_commands
from services.egress import service as service_module
from services.egress.service import EgressService
from services.spec import parse_spec
from services.spec.egress import egress_node, egress_units, transactional_id
from tests.unit.spec.test_spec import problems

TEXT = """\
name: eg
defaults: {partitions: 2}
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor, egress: [{replicas: 2, heartbeat_ms: 50}, {mode: latest}]}
  c: {schema: reading, key: sensor}
operators:
  up: {type: filter, input: a, output: b, where: "True"}
  down: {type: filter, input: b, output: c, where: "True"}
nodes:
  n: {operators: [up], replicas: 2, ha: upstream_backup}
  m: {operators: [down], ha: upstream_backup}
"""
SPEC = parse_spec(TEXT)
STABLE, LATEST = egress_node("b", "stable"), egress_node("b", "latest")


def test_each_egress_is_named_for_its_stream_and_mode() -> None:
    units = egress_units(SPEC)
    assert list(units) == ["egress_b_stable", "egress_b_latest"]
    assert units[STABLE][0] == "b" and units[STABLE][1].replicas == 2 and units[LATEST][1].replicas == 1
    assert transactional_id(SPEC, "b", units[STABLE][1], 1) == "hastream.eg.egress.b.stable.p1"


def test_an_egress_named_as_a_node_is_one_line() -> None:
    text = TEXT.replace("  m: {operators: [down]", "  egress_b_latest: {operators: [down]")
    (line,) = problems(text)
    assert line.endswith("streams.b.egress: 'egress_b_latest' is this egress's name: rename the node")


def test_the_launcher_runs_a_process_per_egress_replica_partition_after_the_nodes() -> None:
    commands = service_commands(SPEC, Path("/s.yaml"))
    roles = [role for role, _ in commands]
    assert roles[-6:] == [
        "egress_b_stable.r0.p0",
        "egress_b_stable.r0.p1",
        "egress_b_stable.r1.p0",
        "egress_b_stable.r1.p1",
        "egress_b_latest.r0.p0",
        "egress_b_latest.r0.p1",
    ]
    argv = dict(commands)["egress_b_stable.r1.p0"]
    assert argv[-9:] == ["egress", "/s.yaml", "b", "--mode", "stable", "--partition", "0", "--replica", "1"]


def test_the_coordinator_keeps_a_primary_per_egress_partition_and_expects_each_replica() -> None:
    takeovers = takeovers_of(SPEC)
    assert takeovers.nodes[STABLE] == (2, 0.15) and takeovers.nodes[LATEST] == (1, 0.3)
    assert heartbeat_ms(SPEC, STABLE) == 50 and heartbeat_ms(SPEC, "n") == 100
    expected = expected_replicas(SPEC)
    assert {(STABLE, p, r) for p in (0, 1) for r in (0, 1)} <= set(expected)
    assert {(LATEST, p, 0) for p in (0, 1)} <= set(expected) and (LATEST, 0, 1) not in expected


def test_a_log_an_egress_follows_is_never_trimmed() -> None:
    """Node m trims by acks what it reads of b, but the egress reads b as an application does."""
    assert "eg.b" not in trimmable(SPEC)
    without = parse_spec(TEXT.replace(", egress: [{replicas: 2, heartbeat_ms: 50}, {mode: latest}]", ""))
    assert trimmable(without)["eg.b"] == ["m"]


def test_each_egress_replica_has_a_login_that_reads_its_stream_and_writes_its_topic_in_transactions() -> None:
    user = usernames(SPEC)["egress_b_stable.r1"]
    assert user == "eg.egress.b.stable.r1"
    assert login_key(SPEC, "egress_b_stable.r1.p0") == "egress_b_stable.r1"
    acls = set(egress_acls(SPEC, STABLE, 1))
    assert Acl(user, "TOPIC", "eg.b", READ) in acls and Acl(user, "TOPIC", "eg.b", WRITE) not in acls
    assert {Acl(user, "TOPIC", "eg.b.stable", op) for op in (READ, WRITE)} <= acls
    prefix = "hastream.eg.egress.b.stable.p"
    assert {Acl(user, TRANSACTIONAL_ID, prefix, op, prefixed=True) for op in (WRITE, DESCRIBE)} <= acls
    assert not any(a.name == "eg.b.latest" for a in acls)


class FakePump:
    """The pump's calls the service makes; ``step`` fails as a fenced commit does once ``fenced`` is set,
    as an aborted one once ``aborted`` is."""

    def __init__(self, spec: Any, stream: str, egress: Any, bootstrap: str, partitions: list[int]) -> None:
        self.partitions, self.topic = partitions, "t"
        self.stable: dict[int, Any] = {}
        self.fenced = self.aborted = self.abandoned = False

    def step(self) -> int:
        if self.fenced:
            raise FencedError("transactional id t was taken over by a newer writer")
        if self.aborted:
            raise TransactionAborted("t: commit_transaction failed and was aborted: partition moved")
        return 0

    def abandon(self) -> None:
        self.abandoned = True


def _service(monkeypatch: pytest.MonkeyPatch) -> EgressService:
    monkeypatch.setattr(service_module, "EgressPump", FakePump)
    stream, e = egress_units(SPEC)[STABLE]
    return EgressService(SPEC, stream, e, 1, 0, "127.0.0.1:1")


def _made_primary(svc: EgressService, epoch: int) -> FakePump:
    """Order ``svc`` (replica 0 of partition 1) to be primary at ``epoch``: the pump it started."""
    svc.on_control(RoleOrder(STABLE, 1, 0, role=Role.PRIMARY.value, epoch=epoch))
    assert isinstance(svc.pump, FakePump)
    return svc.pump


def test_a_replica_writes_its_partition_once_it_is_primary_and_a_replaced_primary_steps_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc = _service(monkeypatch)
    try:
        svc.on_control(RoleOrder(STABLE, 0, 0, role=Role.PRIMARY.value, epoch=3))  # another partition's
        svc.on_control(RoleOrder(STABLE, 1, 1, role=Role.PRIMARY.value, epoch=3))  # another replica's
        assert svc.pump is None and svc.role is Role.CANDIDATE
        svc.on_control(RoleOrder(STABLE, 1, 0, role=Role.SECONDARY.value, epoch=3))
        assert svc.pump is None and svc.role is Role.SECONDARY
        svc.on_control(RoleOrder(STABLE, 1, 0, role=Role.PRIMARY.value, epoch=5))
        assert isinstance(svc.pump, FakePump) and svc.pump.partitions == [1]
        assert (svc.heartbeat.role, svc.heartbeat.epoch) == ("primary", 5)
        svc.on_control(RoleOrder(STABLE, 1, 0, role=Role.SECONDARY.value, epoch=4))  # read late: ignored
        assert svc.role is Role.PRIMARY
        pump = svc.pump
        svc.on_control(RoleOrder(STABLE, 1, 0, role=Role.SECONDARY.value, epoch=6))
        assert pump.abandoned and svc.pump is None, "a replaced primary writes nothing more"
        assert (svc.role, svc.epoch, svc.heartbeat.role) == (Role.SECONDARY, 6, "secondary")
        svc.on_control(RoleOrder(STABLE, 1, 0, role=Role.PRIMARY.value, epoch=8))  # and may take over again
        assert isinstance(svc.pump, FakePump) and svc.role is Role.PRIMARY
    finally:
        svc.control.close()


def test_a_primary_whose_commit_is_fenced_before_its_order_comes_stands_by(monkeypatch: pytest.MonkeyPatch) -> None:
    """A newer primary's transactional init fences this one's producer; the coordinator's order to step
    down may come after this one's next commit: that commit's ``FencedError`` makes it stand by as a
    secondary of the epoch it knows (the coordinator, which failed it, then gives it the newest),
    instead of ending the process."""
    svc = _service(monkeypatch)
    try:
        pump = _made_primary(svc, 5)
        pump.fenced = True
        svc._step()
        assert pump.abandoned and svc.pump is None
        assert (svc.role, svc.epoch, svc.heartbeat.role) == (Role.SECONDARY, 5, "secondary")
        svc.on_control(RoleOrder(STABLE, 1, 0, role=Role.SECONDARY.value, epoch=7))
        assert svc.role is Role.SECONDARY
    finally:
        svc.control.close()  # its heartbeats were never started: nothing else to stop


def test_a_primary_whose_transaction_was_aborted_goes_on_after_the_committed_tail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An aborted transaction's records are never read: the primary lets its pump go and starts one
    again, which goes on after what was committed, as a takeover does, instead of ending the process."""
    svc = _service(monkeypatch)
    try:
        pump = _made_primary(svc, 5)
        pump.aborted = True
        svc._step()
        assert pump.abandoned and isinstance(svc.pump, FakePump) and svc.pump is not pump
        assert (svc.role, svc.epoch, svc.heartbeat.role) == (Role.PRIMARY, 5, "primary")
    finally:
        svc.control.close()
