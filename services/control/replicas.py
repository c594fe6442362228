"""Replica choice: which replica of an upstream node a reader (a node's input port or a client) follows.

Best first: a stable replica, else one producing tentative results, else one busy
reconciling (it produces corrections, not new tuples), else one recovering from a restart
(it replays what it already wrote); never a failed one while another lives. Among replicas
in the same state, one whose stable output lags the most advanced by more than ``behind_ms``
of stream time counts as worse: the paper treats long delays as failures. A reader stays
where it is unless another replica is strictly better, so replicas in equal states and
about as far along do not make it flap.
"""

from __future__ import annotations

from services.control.states import NodeState

RANK = {
    NodeState.STABLE: 0,
    NodeState.UPSTREAM_FAILURE: 1,
    NodeState.STABILIZATION: 2,
    NodeState.RECOVERING: 3,
    NodeState.FAILED: 4,
}


def choose_replica(
    states: list[NodeState], current: int | None, boundaries: list[int] | None = None, behind_ms: int = 0
) -> int:
    """The replica to read: the current one unless another is strictly better (state, then lag)."""

    def rank(r: int) -> tuple[int, bool]:
        if boundaries is None or boundaries[r] < 0:
            return (RANK[states[r]], False)
        lead = max(b for b, s in zip(boundaries, states, strict=True) if s is states[r])
        return (RANK[states[r]], lead - boundaries[r] > behind_ms)

    best = min(range(len(states)), key=lambda r: (rank(r), r))
    if current is not None and rank(current) <= rank(best):
        return current
    return best
