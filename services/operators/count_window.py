"""Keyed count-based window: each key's window closes with its ``count``-th tuple (CEC §IV).

The CEC paper evaluates its checkpoints on count windows because how long one stays open
depends on how often its key comes, not on a clock: a rare key's window can stay open for the
whole run (a *slow* window), a frequent key's closes and reopens at once (a *fast* one). The
next tuple of a key after its window closed opens the key's next window, a new incarnation.

A result has the key, ``window_start`` and ``window_end`` (the ``time`` of its first and last
tuple) and the aggregates; its stime is the closing tuple's, so results come out in input order.
A window that never fills gives no result, not even when the input ends.

Each open window is a state part (``services.operators.parts``) with id ``(key, n)``: ``n``
numbers the windows the operator opened, so a key that reopens is a new part.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence, cast

from services.operators.base import Item, Operator, reason
from services.operators.parts import Admit, PartEvent, PartId
from services.operators.window import Accumulator, window_input, window_result
from services.spec import Aggregate


class _Open:
    """One key's open window: its part number, accumulator, first tuple's time and stime, last time."""

    __slots__ = ("n", "acc", "start", "first", "last")

    def __init__(self, n: int, acc: Accumulator, start: int, first: int) -> None:
        self.n, self.acc, self.start, self.first, self.last = n, acc, start, first, start

    def dump(self) -> tuple:
        return (self.n, self.acc.__getstate__(), self.start, self.first, self.last)

    @staticmethod
    def load(st: tuple) -> _Open:
        n, acc_state, start, first, last = st
        acc = Accumulator(len(acc_state[1]))
        acc.__setstate__(acc_state)
        w = _Open(n, acc, start, first)
        w.last = last
        return w


class CountWindow(Operator):
    stateful = True

    def __init__(self, name: str, key: str, time: str, count: int, aggregates: Sequence[Aggregate]) -> None:
        super().__init__(name)
        self.key, self.time, self.count = key, time, count
        self.aggs = tuple(aggregates)
        self.fields = sorted({a.field for a in self.aggs if a.field})
        self.opened: PartEvent | None = None  # watchers of its parts (``parts``): clear() keeps them
        self.closed: PartEvent | None = None
        self.admit: Admit | None = None  # a recovery's filter of replayed tuples (``parts``)
        self.clear()

    def clear(self) -> None:
        # key -> its open window, oldest opened first (a reopened key goes to the end): the first
        # one's first stime is the stream marker, without a scan
        self.open: OrderedDict[Any, _Open] = OrderedDict()
        self.made = 0  # windows opened so far: the next one's part number
        self._loaded = False  # parts were loaded since the windows were last in their opening order

    def state(self) -> object:
        if self._loaded:
            self._reorder()
        return ([(k, w.dump()) for k, w in self.open.items()], self.made)

    def set_state(self, state: object) -> None:
        items, self.made = cast(tuple, state)
        self.open = OrderedDict((k, _Open.load(st)) for k, st in items)
        self._loaded = False

    # -- state parts (``services.operators.parts``): a part is one key's open window, id (key, n) ------
    def part_ids(self) -> list[PartId]:
        return [(k, w.n) for k, w in self.open.items()]

    def part(self, pid: PartId) -> object:
        """The window's accumulator, times and part number, with the number of windows opened so far,
        which a recovery from parts alone needs to number the next ones alike."""
        k, n = pid
        w = self.open[k]
        if w.n != n:
            raise KeyError(f"part {pid!r} is not open (key {k!r} has window {w.n} open)")
        return (w.dump(), self.made)

    def load_part(self, pid: PartId, state: object) -> None:
        """Parts load in any order; the open windows are put back in the order they opened in once
        the operator is used again (``_reorder``), not at every part."""
        dump, made = cast(tuple, state)
        self.open[pid[0]] = _Open.load(dump)
        self.made = max(self.made, made)
        self._loaded = True

    def _reorder(self) -> None:
        self.open = OrderedDict(sorted(self.open.items(), key=lambda kv: kv[1].n))
        self._loaded = False

    def watch(self, opened: PartEvent | None, closed: PartEvent | None) -> None:
        self.opened, self.closed = opened, closed

    def span(self) -> int:
        """Unbounded in time; 0 says no span bounds it: amnesia writes from its takeover on, each key's
        windows counted from there (gap recovery with wrong values, ``services.ha.amnesia``)."""
        return 0

    def oldest_time(self, port: int) -> int | None:
        """The first stime of the window opened longest ago: windows open in input order."""
        if self._loaded:
            self._reorder()
        for w in self.open.values():
            return w.first
        return None

    def push(self, port: int, items: list[Item]) -> None:
        if self._loaded:
            self._reorder()
        out: list[Item] = []
        tf, kf, fields, size, windows, admit = self.time, self.key, self.fields, self.count, self.open, self.admit
        for item in items:
            try:  # everything that can fail, before anything changes
                t, k, values = window_input(item[0], tf, kf, fields)
            except (KeyError, TypeError) as e:
                self.reject(self.name, item, reason(e))
                continue
            w = windows.get(k)
            if admit is not None and not admit((k, self.made if w is None else w.n)):
                continue
            if w is None:
                w = windows[k] = _Open(self.made, Accumulator(len(fields)), t, item[1])
                self.made += 1
                w.acc.add(values)
                if self.opened is not None:
                    self.opened((k, w.n), item[1])  # after the tuple: the part holds it (CEC's G^open)
            else:
                w.acc.add(values)
                w.last = t
            if w.acc.count >= size:
                del windows[k]
                out.append(
                    (window_result(self.aggs, fields, k, w.start, w.last, w.acc)[0], item[1])
                )  # its stime: the closing tuple's
                if self.closed is not None:
                    self.closed((k, w.n), item[1])
        if out:
            self.emit(out)
