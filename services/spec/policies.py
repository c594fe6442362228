"""The choices DPC leaves to the user: how to reconcile, and what to do with new tuples meanwhile."""

from __future__ import annotations

from enum import Enum


class Reconciliation(str, Enum):
    """How a replica rebuilds its pre-failure state (SIGMOD 2005, section 4.4)."""

    CHECKPOINT = "checkpoint"  # checkpoint/redo: restore a snapshot taken before the first tentative tuple
    UNDO = "undo"  # undo/redo: rebuild the state at the mark from the operators' input logs


class Policy(str, Enum):
    """What a replica does with new input during a failure or while a partner reconciles (section 5)."""

    PROCESS = "process"  # process new tuples at once, tentatively (lowest delay)
    DELAY = "delay"  # hold them up to the node's delay share (fewer tentative tuples)
    SUSPEND = "suspend"  # stop producing while reconciling (stabilization only: replicas reconcile together)


FAILURE_POLICIES = (Policy.PROCESS, Policy.DELAY)
STABILIZATION_POLICIES = (Policy.PROCESS, Policy.DELAY, Policy.SUSPEND)
