"""The node side of DPC's consistency manager (SIGMOD 2005, section 4.4): whose turn to reconcile.

A replica whose failure is over asks the coordinator for its turn (REQUEST, sent again every
``REQUEST_EVERY_S`` without an answer) and reconciles once granted; the round is named by the
replica's clock at its first REQUEST, so a grant is matched to its round, never by clocks, and a
grant for a round that is over is given back at once (DONE). Without a coordinator the replicas
take turns by their states (``may_reconcile_alone``), announcing the turn with a REQUEST, so a
coordinator that comes back knows whose it is. With staggering (any policy but SUSPEND) a
granted replica waits while a partner reconciles.
"""

from __future__ import annotations

from services.control.messages import COORDINATOR, ControlMessage, Done, Grant, Request, now_ms
from services.control.states import NodeState
from services.dpc.consistency import may_reconcile_alone
from services.node.scheme import NodeRuntime

REQUEST_EVERY_S = 2.0  # a REQUEST without an answer is sent again after this long


class Round:
    """One node replica partition's turns to reconcile (see the module's docstring)."""

    def __init__(self, node: NodeRuntime) -> None:
        self.node = node
        self.requested_at = 0.0
        self.requested_ms = 0  # this replica's clock at this round's first REQUEST: names the round
        self.granted = False

    def on_control(self, msg: ControlMessage) -> None:
        node = self.node
        if not isinstance(msg, Grant) or not msg.is_for(node.plan.node, node.partition, node.replica):
            return
        if self.requested_ms and msg.round_ms == self.requested_ms:
            self.granted = True  # the answer to this round's REQUEST (matched by round, not by clocks)
        elif not self.granted and msg.round_ms and msg.round_ms != self.requested_ms:
            # A grant for a round that is over (a re-sent or replayed one): give it back at
            # once, or the partner would wait for its lease to expire.
            node.send_control(Done(*self._address(), round_ms=msg.round_ms))

    def turn(self, now: float, partners: list[NodeState], stagger: bool) -> bool:
        """Whether this replica reconciles now; asks for the turn (again) when it has none."""
        if not self.granted and self.node.monitor.state(COORDINATOR, 0, 0) is NodeState.FAILED:
            if may_reconcile_alone(self.node.replica, partners, stagger):
                self.granted = True
                self._request(stagger)  # announced: a coordinator that comes back knows whose turn it is
        if self.granted and stagger and NodeState.STABILIZATION in partners:
            return False  # a partner reconciles already (an older grant, or its own fallback turn): wait for it
        if self.granted:
            return True
        if now - self.requested_at > REQUEST_EVERY_S:
            self.requested_at = now
            self._request(stagger)
        return False

    def done(self) -> None:
        """The reconciliation is over: DONE to the coordinator, and the next failure is a new round."""
        self.node.send_control(Done(*self._address(), round_ms=self.requested_ms))
        self.granted = False
        self.requested_at, self.requested_ms = 0.0, 0

    def _request(self, stagger: bool) -> None:
        self.requested_ms = self.requested_ms or now_ms()
        self.node.send_control(Request(*self._address(), stagger=stagger, round_ms=self.requested_ms))

    def _address(self) -> tuple[str, int, int]:
        """The node replica partition every message of its rounds is from."""
        node = self.node
        return node.plan.node, node.partition, node.replica
