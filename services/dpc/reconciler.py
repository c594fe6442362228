"""Reconciliation: back to the state before the failure, so the corrected input can be redone (SIGMOD 2005, 4.4).

Two ways, behind one interface. Checkpoint/redo takes a snapshot of every operator right
before the first tentative tuple and restores it. Undo/redo marks the operators' input
logs instead and rebuilds the state at the mark (``services.dpc.undo``): no snapshot, at
the price of logging input. Either way, SUnion then redoes the stable version of every
bucket emitted since, and SOutput sends UNDO before the corrections.

A failure that outgrew the memory bound (``sunion`` spills it) is redone from the logs;
undo/redo then stops logging and comes back by restoring the snapshot instead, so its
input logs stay bounded too.
"""

from __future__ import annotations

from typing import Protocol

from services.spec.policies import Reconciliation


class Reconcilable(Protocol):
    """What the node's operators offer reconciliation (``services.node.pipeline.NodePipeline``)."""

    def snapshot(self) -> bytes: ...
    def restore(self, data: bytes) -> None: ...
    def mark(self) -> None: ...
    def undo(self) -> None: ...
    def unmark(self) -> None: ...


class Reconciler(Protocol):
    def begin(self, snapshot: bytes) -> None:
        """Right before the first tentative tuple: remember the state to come back to.

        ``snapshot`` is that state, serialized: the node keeps it anyway for its restart images.
        """

    def rollback(self) -> None:
        """Back to the state at ``begin()``; what ran since is forgotten."""

    def spill(self) -> None:
        """The failure spilled: keep nothing that grows with it until ``rollback()``."""


class CheckpointRedo:
    def __init__(self, operators: Reconcilable) -> None:
        self.operators = operators
        self.saved: bytes | None = None

    def begin(self, snapshot: bytes) -> None:
        self.saved = snapshot

    def rollback(self) -> None:
        if self.saved is None:
            raise RuntimeError("checkpoint/redo rollback without a snapshot")
        self.operators.restore(self.saved)
        self.saved = None

    def spill(self) -> None:
        pass  # the snapshot does not grow


class UndoRedo:
    def __init__(self, operators: Reconcilable) -> None:
        self.operators = operators
        self.saved: bytes | None = None  # the snapshot the node keeps anyway: the way back once spilled
        self.spilled = False

    def begin(self, snapshot: bytes) -> None:
        self.operators.mark()
        self.saved, self.spilled = snapshot, False

    def spill(self) -> None:
        if not self.spilled:
            self.operators.unmark()  # the logs trim again
            self.spilled = True

    def rollback(self) -> None:
        if self.spilled and self.saved is not None:
            self.operators.restore(self.saved)
        else:
            self.operators.undo()
        self.saved, self.spilled = None, False


def reconciler(method: Reconciliation, operators: Reconcilable) -> Reconciler:
    return CheckpointRedo(operators) if method is Reconciliation.CHECKPOINT else UndoRedo(operators)
