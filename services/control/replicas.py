"""Replica choice: which replica of an upstream node a reader (a node's input port or a client) follows.

Best first: a stable replica, else one producing tentative results, else one busy
reconciling (it produces corrections, not new tuples); never a failed one while another
lives. A reader stays where it is unless another replica is strictly better, so replicas
in equal states do not make it flap.
"""

from __future__ import annotations

from services.dpc.states import NodeState

RANK = {NodeState.STABLE: 0, NodeState.UPSTREAM_FAILURE: 1, NodeState.STABILIZATION: 2, NodeState.FAILED: 3}


def choose_replica(states: list[NodeState], current: int | None) -> int:
    """The replica to read: the current one unless another is in a strictly better state."""
    best = min(range(len(states)), key=lambda r: (RANK[states[r]], r))
    if current is not None and RANK[states[current]] <= RANK[states[best]]:
        return current
    return best
