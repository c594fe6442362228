"""One replica of one egress partition, under the coordinator: the primary writes, the others stand by.

An egress is replicated as an HA node is (``services.coordinator.takeover``): each replica
heartbeats under the egress's name (``services.spec.egress.egress_node``), starts as a
candidate, and the coordinator makes one primary per partition and elects another when it
falls silent. The primary runs the partition's pump (``services.egress.pump``): its
transactional producer's ``init`` fences whoever wrote the partition before (a killed primary,
or a paused one that wakes up: its next commit fails) and aborts what it left open, and the
pump goes on after the partition's committed tail. A secondary holds nothing: a takeover costs
a transactional init and a read of the topic's tail.

A primary replaced while it stood still (told it is secondary, or its commit fenced) steps down
in place: it drops its pump, its open transaction aborted, and stands by as a secondary. It has
no state to rebuild, so it does not need a restart (an HA node does) to be ready for the next
takeover. A primary whose transaction was aborted (a partition moved under it, the broker's
transaction timeout) lets its pump go the same way and starts another, which goes on after the
committed tail as a takeover does.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from services.control.channel import ControlReader
from services.control.heartbeat import HeartbeatSender
from services.control.messages import ControlMessage, RoleOrder, ordered_role
from services.control.states import NodeState, Role
from services.core.errors import FencedError
from services.core.transactions import TransactionAborted
from services.egress.pump import EgressPump
from services.ha.scheme import TAKEOVER_S
from services.spec.egress import egress_node
from services.spec.model import EgressDef, Spec

log = logging.getLogger(__name__)

IDLE_S = 0.05  # a replica with nothing to write looks at its orders this often


class EgressService:
    """Replica ``replica`` of partition ``partition`` of the ``egress`` of ``stream``: ``run`` until told to stop."""

    def __init__(self, spec: Spec, stream: str, egress: EgressDef, partition: int, replica: int, bootstrap: str):
        self.spec, self.stream, self.egress = spec, stream, egress
        self.partition, self.replica, self.bootstrap = partition, replica, bootstrap
        self.name = egress_node(stream, egress.mode)
        self.role, self.epoch = Role.CANDIDATE, 0
        self.pump: EgressPump | None = None
        self.written = 0  # stable tuples this replica wrote as primary
        beat_s = egress.heartbeat_ms / 1000
        self.heartbeat = HeartbeatSender(
            bootstrap, spec.heartbeat_topic, self.name, partition, replica, beat_s, stall_s=egress.detection_ms / 1000
        )
        self.control = ControlReader(bootstrap, spec.control_topic, f"{self.name}.r{replica}.p{partition}.control")

    def run(self, running: Callable[[], bool]) -> None:
        """Follow the coordinator's orders and write as primary while ``running()``."""
        self._announce(Role.CANDIDATE, 0)
        self.heartbeat.start()
        clean = False
        try:
            while running():
                self.heartbeat.tick()
                for msg in self.control.poll():
                    self.on_control(msg)
                if self.pump is not None:
                    self._step()
                else:
                    time.sleep(IDLE_S)
            clean = True
        finally:
            self._close(clean)

    def on_control(self, msg: ControlMessage) -> None:
        try:
            order = ordered_role(msg, self.name, self.partition, self.replica, self.role, self.epoch)
        except FencedError:
            assert isinstance(msg, RoleOrder)
            self._step_down(msg.epoch, f"failed over to another replica at epoch {msg.epoch}")
            return
        if order is None:
            return
        role, epoch = order
        if role is Role.PRIMARY:
            self._promote(epoch)
        else:
            self._announce(Role.SECONDARY, epoch)

    def _promote(self, epoch: int) -> None:
        """Take the partition over: fence the old writer, go on after the committed tail."""
        started = time.monotonic()
        log.info("taking over at epoch %d", epoch)
        self._announce(Role.PRIMARY, epoch, NodeState.RECOVERING)
        with self.heartbeat.working(TAKEOVER_S):
            self.pump = EgressPump(self.spec, self.stream, self.egress, self.bootstrap, [self.partition])
        self.heartbeat.set_state(NodeState.STABLE)
        log.info(
            "primary at epoch %d, writing %s in %.0f ms", epoch, self.pump.topic, (time.monotonic() - started) * 1e3
        )

    def _step(self) -> None:
        assert self.pump is not None
        try:
            self.pump.step()
        except FencedError as e:  # a newer primary's init fenced this one before its order came:
            self._step_down(self.epoch, str(e))  # the coordinator sends the new epoch
            return
        except TransactionAborted as e:  # its records are never read: go on after the committed tail
            log.warning("%s: starting again after what was committed", e)
            self._drop_pump()
            self._promote(self.epoch)
            return
        self._report()

    def _step_down(self, epoch: int, why: str) -> None:
        """Stop writing (what is open is aborted, never read) and stand by as a secondary at ``epoch``."""
        log.warning("stepping down from primary: %s", why)
        self._drop_pump()
        self._announce(Role.SECONDARY, epoch)

    def _drop_pump(self) -> None:
        """Let the pump go: what it has open is aborted, never read."""
        if self.pump is not None:
            self.pump.abandon()
            self.pump = None

    def _announce(self, role: Role, epoch: int, state: NodeState = NodeState.STABLE) -> None:
        self.role, self.epoch = role, epoch
        hb = self.heartbeat
        hb.role, hb.epoch, hb.state = role.value, epoch, state
        hb.beat()

    def _report(self) -> None:
        assert self.pump is not None
        w = self.pump.stable.get(self.partition)
        self.written = w.written if w is not None else 0
        self.heartbeat.report(self.written, -1, 0)

    def _close(self, clean: bool) -> None:
        """A clean stop commits what is open; a failed one aborts it, or leaves it to the successor."""
        try:
            if self.pump is not None:
                if clean:
                    self.pump.close()
                else:
                    self.pump.abandon()
        finally:
            self.heartbeat.stop()
            self.control.close()
