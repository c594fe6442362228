"""The states of a DPC node replica and the transitions the paper allows (SIGMOD 2005, Fig. 4).

STABLE -> UPSTREAM_FAILURE when the node processes its first tentative input;
UPSTREAM_FAILURE -> STABILIZATION once every tentative input has its stable version and
the node may reconcile; STABILIZATION -> STABLE when reconciliation is done (or back to
UPSTREAM_FAILURE if a new failure started meanwhile). The states themselves are every
replica's vocabulary (``services.control.states``); RECOVERING and FAILED have no moves here.
"""

from __future__ import annotations

from services.control.states import NodeState

TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    NodeState.STABLE: frozenset({NodeState.UPSTREAM_FAILURE}),
    NodeState.UPSTREAM_FAILURE: frozenset({NodeState.STABILIZATION}),
    NodeState.STABILIZATION: frozenset({NodeState.STABLE, NodeState.UPSTREAM_FAILURE}),
    NodeState.RECOVERING: frozenset(),
    NodeState.FAILED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A state change the DPC state machine does not allow: a bug, never bad input."""


def check_transition(old: NodeState, new: NodeState) -> NodeState:
    """``new`` if the move from ``old`` is allowed (staying put always is); raises otherwise."""
    if new is not old and new not in TRANSITIONS[old]:
        raise IllegalTransition(f"DPC node state cannot go from {old.value} to {new.value}")
    return new
