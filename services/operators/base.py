"""The operator interface: push a batch of tuples in, emitted batches go to ``emit``.

Tuples travel as lists of ``(record, stime)`` so that a stateless operator handles a whole
batch in one comprehension instead of a chain of calls per tuple. A batch is a run of
consecutive tuples of one input, in arrival order.

Operators are deterministic (the DPC assumption): the same input sequence always gives
the same output sequence, so replicas agree and a replay reproduces the output.

Besides ``push``, the DPC machinery needs from an operator (the defaults suit stateless ones):

- ``advance(stime)``: a time promise (SUnion's stable frontier), so windows close and join
  state expires without waiting for the next tuple, and the node can send a BOUNDARY;
- ``state()``/``set_state()``: checkpoint/redo (the paper's pack/unpack state methods);
- ``delta()``/``apply_delta()``: what changed since the last ``delta()`` (passive standby's
  checkpoints between full images); the default is the whole state each time;
- ``clear()``/``oldest_time(port)``: undo/redo, through ``services.dpc.undo.UndoLog``
  (the paper's clear() and findOldestTuple(stream_id));
- ``held()``/``due()``/``flush()``: an operator whose results cost a job to compute (the
  Spark window) may decide them in ``push``/``advance`` and emit them later, in one job per
  flush; until then the node's BOUNDARY stays at ``held()``.

A tuple an operator cannot process (an expression that divides by zero, a None where a
number belongs) goes to ``reject`` with the reason, before it changes any state, and the
operator carries on: every replica rejects the same tuples, so they stay identical.
"""

from __future__ import annotations

from typing import Any, Callable

Record = dict[str, Any]
Item = tuple[Record, int]  # (record, stime)
Emit = Callable[[list[Item]], None]
Reject = Callable[[str, Item, str], None]  # (operator name, tuple, reason)


def _discard(items: list[Item]) -> None:
    pass


def _ignore(op: str, item: Item, reason: str) -> None:
    pass


def _raise(op: str, item: Item, reason: str) -> None:
    raise ValueError(f"operator '{op}' rejected {item[0]!r}: {reason}")


def reason(e: Exception) -> str:
    """Why a tuple was rejected, for the dead-letter record."""
    return f"{type(e).__name__}: {e}"


class Operator:
    """Base of all operators. ``port`` is the input index (0 unless union/join)."""

    stateful = False  # keeps state across batches: checkpointed, and logged for undo

    def __init__(self, name: str) -> None:
        self.name = name
        self.emit: Emit = _discard
        self.reject: Reject = _raise  # the node routes it to the dead-letter topic

    def push(self, port: int, items: list[Item]) -> None:
        raise NotImplementedError

    def advance(self, stime: int) -> None:
        """Every future input tuple has stime >= ``stime``: settle what that decides already.

        Must not change the output sequence, only make it come out earlier, and nothing
        emitted after it may have a smaller stime (the node forwards ``stime`` as a BOUNDARY).
        """

    def held(self) -> int | None:
        """Smallest stime of a result already decided but not emitted yet (None: nothing held).

        The output sequence is the same whenever ``flush`` runs; only BOUNDARY must wait."""
        return None

    def due(self, now: float) -> bool:
        """Whether held results should be flushed now (``now``: monotonic seconds)."""
        return False

    def flush(self, progress: Callable[[], None]) -> None:
        """Emit every held result; ``progress`` is called while a long job runs (heartbeats)."""

    def state(self) -> object:
        """Everything ``push`` and ``advance`` depend on, picklable (no callbacks, no compiled code).

        May be the live objects: the caller serializes it before feeding more input.
        """
        return None

    def set_state(self, state: object) -> None:
        """Continue from a ``state()`` (the operator takes ownership of it)."""

    def delta(self) -> object:
        """What changed since the previous ``delta()``, picklable (may be live objects: the caller
        serializes it before feeding more input). The first call after the operator was built,
        cleared or given a state returns the whole state, since nothing before it is known.
        An operator that does not track its changes returns the whole state every time."""
        return self.state()

    def apply_delta(self, delta: object) -> None:
        """Bring a copy that held the state of the previous ``delta()`` (or of a ``state()``) to the
        state of this one: a warm standby follows its primary this way."""
        self.set_state(delta)

    def clear(self) -> None:
        """Back to the empty state of a freshly built operator."""

    def span(self) -> int:
        """How far back in input time the inputs of one result reach: a result at time t depends on input
        from t - span() on (a window's size, a join's ``within``; 0 for an operator without state)."""
        return 0

    def oldest_time(self, port: int) -> int | None:
        """Stream marker: smallest stime of input ``port`` still contributing to the state, in stime
        whatever time field the operator itself goes by (upstream backup's acks and the undo log
        compare it with stimes).

        Replaying the input from there onto a cleared operator rebuilds the state; None
        when nothing from that input is held. Where the input is not strictly in stime order (an
        in-order input may take a tuple behind a newer one), it is at most the stime of the first
        tuple taken that still contributes: what the acks and the undo log keep starts there.
        """
        return None
