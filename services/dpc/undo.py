"""Undo/redo for a stateful operator (Borealis DPC, "state reconciliation"): an input log.

Undoing tentative input directly would mean un-closing windows and bringing expired join
tuples back. Instead, as in the paper, the operator's input is logged and an undo rebuilds
the state it had right before the first tentative tuple: ``clear()`` it, then re-process
the logged input up to that point with its output discarded (it was emitted already).

The log only has to reach back to the stream markers (``oldest_time(port)``: the oldest
input still contributing to the state, in stime). It is trimmed to them every ``trim_every``
logged tuples rather than per tuple, and once more, exactly, at ``mark()``: the entries before
the first one that holds a tuple at or after the smallest marker go. Trimming stops while
a mark is set: the state at the mark must stay rebuildable.

Requirements: input in non-decreasing stime across ports (SUnion's order; ``advance(t)``
with ``t`` at most the next tuple's stime), up to the tuples an in-order input takes behind a
newer one, and batches that are not modified after being pushed (the log keeps them, not
copies). Rebuilding from the markers restores everything that decides future output; what the
trimmed input alone set (a watermark below every future tuple, the ``late`` counter) may come
back lower, which no ordered input can notice.

Nothing of this runs unless the node is built with ``undo=True``.
"""

from __future__ import annotations

import pickle
from operator import itemgetter
from typing import cast

from services.operators.base import Item, Operator, _discard, _ignore

ADVANCE = -1  # port of a logged advance(stime) entry
_stime = itemgetter(1)  # of an Item

# One log entry: (port, items) for a pushed batch, (ADVANCE, stime) for an advance.
Entry = tuple[int, "list[Item] | int"]


def _before(entry: Entry, marker: int) -> bool:
    """Whether the whole entry is older than ``marker``: every tuple, not just the last, since a node
    with one input takes it in log order (SUnion's ``in_order``), where a tuple may be older than the
    one before it in the same batch."""
    port, x = entry
    if isinstance(x, int):
        return x < marker
    return x[-1][1] < marker and max(map(_stime, x)) < marker


class UndoLog:
    """Wraps one stateful operator: feed it through ``push``/``advance`` here to make it undoable."""

    def __init__(self, op: Operator, ports: int, trim_every: int = 1024) -> None:
        self.op, self.ports, self.trim_every = op, ports, trim_every
        self.entries: list[Entry] = []
        self.mark_at: int | None = None  # len(entries) at mark()
        self.since_trim = 0
        # After a restore: the restored state (pickled), to rebuild from instead of clear(),
        # until the markers pass ``base_until`` (the first stime pushed after it).
        self.base: bytes | None = None
        self.base_until: int | None = None

    # -- the operator's input --------------------------------------------------------
    def push(self, port: int, items: list[Item]) -> None:
        if items:
            if self.base is not None and self.base_until is None:
                self.base_until = items[0][1]
            self.entries.append((port, items))
            self.since_trim += len(items)
        self.op.push(port, items)
        if self.since_trim >= self.trim_every and self.mark_at is None:
            self.trim()

    def advance(self, stime: int) -> None:
        self.entries.append((ADVANCE, stime))
        self.since_trim += 1
        self.op.advance(stime)
        if self.since_trim >= self.trim_every and self.mark_at is None:
            self.trim()

    def trim(self) -> None:
        """Drop the entries older than every stream marker: the state no longer depends on them."""
        self.since_trim = 0
        marks = [t for t in map(self.op.oldest_time, range(self.ports)) if t is not None]
        marker = min(marks) if marks else None
        if self.base is not None:
            if marker is not None and (self.base_until is None or marker <= self.base_until):
                return  # the restored state still contributes: keep it and everything after it
            self.base = self.base_until = None
        entries = self.entries
        if marker is None:  # nothing held: nothing to replay
            entries.clear()
            return
        i = 0
        while i < len(entries) and _before(entries[i], marker):
            i += 1
        del entries[:i]

    # -- reconciliation ---------------------------------------------------------------
    def mark(self) -> None:
        """Remember the current state as the one ``undo()`` returns to (kept if already marked)."""
        if self.mark_at is None:
            self.trim()
            self.mark_at = len(self.entries)

    def unmark(self) -> None:
        self.mark_at = None

    def undo(self) -> None:
        """Back to the state at ``mark()``: forget the input since, rebuild from the rest silently."""
        if self.mark_at is None:
            raise RuntimeError(f"undo of operator '{self.op.name}' without a mark")
        del self.entries[self.mark_at :]
        self.mark_at = None
        op, emit, reject = self.op, self.op.emit, self.op.reject
        if self.base is not None:
            op.set_state(pickle.loads(self.base))
        else:
            op.clear()
        op.emit, op.reject = _discard, _ignore  # everything replayed was emitted (or rejected) before the mark
        try:
            for port, x in self.entries:
                if port == ADVANCE:
                    op.advance(cast(int, x))
                else:
                    op.push(port, cast("list[Item]", x))
        finally:
            op.emit, op.reject = emit, reject

    def restart(self) -> None:
        """The operator's state was just replaced (restore): log afresh, with that state as the base."""
        self.entries.clear()
        self.mark_at = None
        self.since_trim = 0
        held = any(self.op.oldest_time(p) is not None for p in range(self.ports))
        self.base = pickle.dumps(self.op.state(), protocol=pickle.HIGHEST_PROTOCOL) if held else None
        self.base_until = None
