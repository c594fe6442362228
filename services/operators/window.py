"""Keyed tumbling and sliding window aggregate over event time.

A window [start, start+size) closes when a tuple with time >= its end arrives (the input
is in time order per partition, so that tuple proves no earlier one is still coming), or
when ``advance`` promises that time without a tuple. Closed windows are emitted in
(start, key) order, which keeps replicas identical.

Two clocks meet here: the window's ``time`` field (window starts and ends, the watermark) and
the tuples' stime (the stream time SUnion orders by, and that time promises and stream markers
are in). They are the same when ``time`` names the field the stime was taken from, which is what
hastream expects (docs/spec.md, operators); nothing checks it. The stream marker does not depend
on it: each window remembers the stime of the tuple that opened it (``firsts``), and
``oldest_time`` is the smallest of those. ``advance(stime)`` does: it moves the watermark to a
stime, so a time field behind the stime (an event time older than an ingress's Kafka timestamp,
seconds where the stime is ms) closes windows before their tuples come, and they count as late;
one ahead of it (``ts + 60000``) is safe, its windows then close only as tuples pass their end.
"""

from __future__ import annotations

from typing import Any, Sequence, cast

from services.core.tuples import NO_TIME
from services.operators.base import Item, Operator, reason
from services.operators.parts import Admit, PartEvent, PartId
from services.spec import Aggregate

# The first stime of a window restored from a state, delta or part saved before windows kept it:
# unknown, so earlier than every tuple time. Markers then keep all the input from before the restore
# (the undo log its restored base) until those windows close, never less than the state needs.
_UNKNOWN = NO_TIME


def window_starts(t: int, size: int, slide: int) -> range:
    """Starts of every window [s, s+size) containing time ``t``; windows are aligned to ``slide``."""
    last = (t // slide) * slide
    return range(last - size + slide, last + 1, slide)


def _numbers(values: list[Any]) -> bool:
    for v in values:
        if v.__class__ is not float and v.__class__ is not int:
            return False
    return True


def window_input(rec: dict[str, Any], tf: str, kf: str, fields: Sequence[str]) -> tuple[int, Any, list[Any]]:
    """(time, key, aggregated values) of an input record; KeyError or TypeError naming what is wrong."""
    t, k = rec[tf], rec[kf]
    values = [rec[f] for f in fields]
    if t.__class__ is not int or not _numbers(values):
        raise TypeError(f"'{tf}' must be an integer and {fields} numbers, got {t!r} and {values!r}")
    hash(k)
    return t, k, values


class Accumulator:
    """count plus sum/min/max per aggregated field."""

    __slots__ = ("count", "sums", "mins", "maxs")

    def __init__(self, nfields: int) -> None:
        self.count = 0
        self.sums = [0.0] * nfields
        self.mins: list[Any] = [None] * nfields
        self.maxs: list[Any] = [None] * nfields

    def add(self, values: Sequence[Any]) -> None:
        self.count += 1
        sums, mins, maxs = self.sums, self.mins, self.maxs
        for i, v in enumerate(values):
            sums[i] += v
            if mins[i] is None or v < mins[i]:
                mins[i] = v
            if maxs[i] is None or v > maxs[i]:
                maxs[i] = v

    # A plain tuple pickles smaller and faster than the default slots state (checkpoints).
    def __getstate__(self) -> tuple:
        return (self.count, self.sums, self.mins, self.maxs)

    def __setstate__(self, state: tuple) -> None:
        self.count, self.sums, self.mins, self.maxs = state


def finish(aggs: Sequence[Aggregate], fields: Sequence[str], acc: Accumulator) -> dict[str, Any]:
    """Aggregate columns of one closed window of one key."""
    out: dict[str, Any] = {}
    for a in aggs:
        if a.func == "count":
            out[a.out] = acc.count
            continue
        i = fields.index(a.field or "")
        if a.func == "sum":
            out[a.out] = acc.sums[i]
        elif a.func == "avg":
            out[a.out] = acc.sums[i] / acc.count
        elif a.func == "min":
            out[a.out] = acc.mins[i]
        else:
            out[a.out] = acc.maxs[i]
    return out


def window_result(
    aggs: Sequence[Aggregate], fields: Sequence[str], k: Any, start: int, end: int, acc: Accumulator
) -> Item:
    """The output tuple of one closed window of one key; its stime is the window's end."""
    rec = {"key": str(k), "window_start": start, "window_end": end}
    rec.update(finish(aggs, fields, acc))
    return (rec, end)


class WindowAggregate(Operator):
    stateful = True

    def __init__(self, name: str, key: str, time: str, size: int, slide: int, aggregates: Sequence[Aggregate]) -> None:
        super().__init__(name)
        self.key, self.time, self.size, self.slide = key, time, size, slide
        self.aggs = tuple(aggregates)
        self.fields = sorted({a.field for a in self.aggs if a.field})
        self.opened: PartEvent | None = None  # watchers of its parts (``parts``): clear() keeps them
        self.closed: PartEvent | None = None
        self.admit: Admit | None = None  # a recovery's filter of replayed tuples (``parts``)
        self.clear()

    def clear(self) -> None:
        self.windows: dict[int, dict[Any, Accumulator]] = {}  # start -> key -> accumulator
        # start -> stime of the tuple that opened the window (of any key): the stream marker's parts
        self.firsts: dict[int, int] = {}
        self._oldest: int | None = None  # min(firsts) unless ``_stale``: worked out when asked
        self._stale = False
        self.watermark: int | None = None
        self.late = 0  # tuples that arrived after some of their windows had closed
        self.dirty: set[tuple[int, Any]] | None = None  # (start, key) changed since the last delta()

    def state(self) -> object:
        return (self.windows, self.watermark, self.late, self.firsts)

    def set_state(self, state: object) -> None:
        """Also takes a state saved before windows kept their first stimes: their marker is ``_UNKNOWN``."""
        st = cast(tuple, state)
        self.windows, self.watermark, self.late = st[:3]
        self.firsts = st[3] if len(st) > 3 else dict.fromkeys(self.windows, _UNKNOWN)
        self._stale = True
        self.dirty = None

    def delta(self) -> object:
        """The accumulators changed since the last call (of windows still open), the watermark, the
        late count and the first stimes of the windows changed: the watermark says which windows closed
        meanwhile. Changes are tracked per (window, key) from the first call on, which returns the whole
        state."""
        dirty, windows = self.dirty, self.windows
        self.dirty = set()
        if dirty is None:
            return (True, self.state())
        changed: dict[int, dict[Any, Accumulator]] = {}
        for start, k in dirty:
            w = windows.get(start)
            if w is not None:
                changed.setdefault(start, {})[k] = w[k]
        firsts = self.firsts
        return (False, (changed, self.watermark, self.late, {start: firsts[start] for start in changed}))

    def apply_delta(self, delta: object) -> None:
        full, body = cast(tuple[bool, Any], delta)
        if full:
            self.set_state(body)
            return
        changed, self.watermark, self.late = body[:3]
        marks = body[3] if len(body) > 3 else {}  # none in a delta saved before windows kept them
        windows, firsts = self.windows, self.firsts
        for start, accs in changed.items():
            w = windows.get(start)
            if w is None:
                w = windows[start] = {}
                firsts[start] = marks.get(start, _UNKNOWN)
            w.update(accs)
        if self.watermark is not None:
            for start in [s for s in windows if s + self.size <= self.watermark]:
                del windows[start], firsts[start]  # closed since the last delta
        self._stale = True

    # -- state parts (``services.operators.parts``): a part is one key's window, id (key, start) ----------
    def part_ids(self) -> list[PartId]:
        return [(k, start) for start, w in self.windows.items() for k in w]

    def part(self, pid: PartId) -> object:
        """The key's accumulator and its window's first stime: the same in every part of the window,
        whose state they rebuild together (the tuple that opened the window is in one of them)."""
        k, start = pid
        return (self.windows[start][k].__getstate__(), self.firsts[start])

    def load_part(self, pid: PartId, state: object) -> None:
        """A window's marker is the smallest its loaded parts carry: a window assembled from some of its
        parts only holds no input from before it. A part saved before parts carried it (a bare accumulator)
        gives ``_UNKNOWN``."""
        k, start = pid
        st = cast(tuple, state)
        acc_state, first = st if len(st) == 2 else (st, _UNKNOWN)
        acc = Accumulator(len(self.fields))
        acc.__setstate__(acc_state)
        self.windows.setdefault(start, {})[k] = acc
        self.firsts[start] = min(first, self.firsts.get(start, first))
        self._stale = True

    def watch(self, opened: PartEvent | None, closed: PartEvent | None) -> None:
        self.opened, self.closed = opened, closed

    def span(self) -> int:
        return self.size

    def oldest_time(self, port: int) -> int | None:
        """The smallest stime of a tuple that opened a window still open: in the stime order the input
        comes in, no tuple in an open window has a smaller one. In stime, whatever the ``time`` field."""
        if self._stale:  # once per window opened or closed at most: the same between them
            self._oldest = min(self.firsts.values(), default=None)
            self._stale = False
        return self._oldest

    def advance(self, stime: int) -> None:
        """Close the windows a tuple at ``stime`` would close, and move the watermark as it would."""
        if self.watermark is None or stime > self.watermark:
            self.watermark = stime
            out: list[Item] = []
            self._close(stime, out)
            if out:
                self.emit(out)

    def push(self, port: int, items: list[Item]) -> None:
        out: list[Item] = []
        tf, kf, fields = self.time, self.key, self.fields
        size, slide, windows, nf, dirty = self.size, self.slide, self.windows, len(self.fields), self.dirty
        opened, firsts, admit = self.opened, self.firsts, self.admit
        for item in items:
            try:  # everything that can fail, before anything changes
                t, k, values = window_input(item[0], tf, kf, fields)
            except (KeyError, TypeError) as e:
                self.reject(self.name, item, reason(e))
                continue
            if self.watermark is None or t > self.watermark:
                self.watermark = t
                self._close(t, out)
            for start in window_starts(t, size, slide):
                if start + size <= self.watermark:
                    self.late += 1
                    continue
                if admit is not None and not admit((k, start)):
                    continue
                w = windows.get(start)
                if w is None:
                    w = windows[start] = {}
                    firsts[start] = item[1]  # its first tuple: the smallest stime it will hold
                    self._stale = True
                acc = w.get(k)
                if acc is None:
                    acc = w[k] = Accumulator(nf)
                    acc.add(values)
                    if opened is not None:
                        opened((k, start), item[1])  # after the tuple: the part holds it (CEC's G^open)
                else:
                    acc.add(values)
                if dirty is not None:
                    dirty.add((start, k))
        if out:
            self.emit(out)

    def _close(self, watermark: int, out: list[Item]) -> None:
        """Append the results of every window that ends at or before ``watermark``."""
        size = self.size
        for start in sorted(self.windows):
            if start + size > watermark:
                break
            w = self.windows.pop(start)
            del self.firsts[start]
            self._stale = True
            end = start + size
            for k in sorted(w):
                out.append(window_result(self.aggs, self.fields, k, start, end, w[k]))
            if self.closed is not None:
                for k in sorted(w):
                    self.closed((k, start), end)  # the result's stime
