"""The DPC state machine allows exactly the paper's transitions."""

from __future__ import annotations

import pytest

from services.dpc.states import TRANSITIONS, IllegalTransition, NodeState, check_transition

S, UF, STAB, F = NodeState.STABLE, NodeState.UPSTREAM_FAILURE, NodeState.STABILIZATION, NodeState.FAILED


@pytest.mark.parametrize("old,new", [(S, UF), (UF, STAB), (STAB, S), (STAB, UF), (S, S), (UF, UF)])
def test_allowed(old: NodeState, new: NodeState) -> None:
    assert check_transition(old, new) is new


@pytest.mark.parametrize("old,new", [(S, STAB), (UF, S), (S, F), (UF, F), (F, S)])
def test_refused(old: NodeState, new: NodeState) -> None:
    with pytest.raises(IllegalTransition, match=f"from {old.value} to {new.value}"):
        check_transition(old, new)


def test_failed_is_only_given_by_observers() -> None:
    assert all(F not in targets for targets in TRANSITIONS.values())
