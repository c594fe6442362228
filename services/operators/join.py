"""Windowed equi-join of two streams: pairs with equal keys at most ``within`` ms apart.

Symmetric hash join: each arriving tuple probes the other side's state, then is kept
until the other side's time (or an ``advance``) has moved past it by more than ``within``
(inputs are in time order per partition, so no later tuple could match it).

``advance(stime)`` compares a stime with the ``time`` field, as the window's does
(``services.operators.window``): a time field behind the stime expires tuples that could still
match. The stream marker is the oldest kept tuple's stime, whatever the time field.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, cast

from services.operators.base import Item, Operator, reason
from services.operators.parts import PartEvent, PartId
from services.spec.expr import EVAL_ERRORS, compile_expr

# What the join keeps: per side, key -> tuples; per side, arrival order; per side, the time promised.
JoinState = tuple[tuple[dict[Any, deque], dict[Any, deque]], tuple[deque, deque], list[int | None]]


class WindowJoin(Operator):
    stateful = True

    def __init__(
        self,
        name: str,
        left_key: str,
        right_key: str,
        time: str,
        within: int,
        fields: dict[str, str],
        left_fields: list[str],
        right_fields: list[str],
    ) -> None:
        super().__init__(name)
        self.keys = (left_key, right_key)
        self.time, self.within = time, within
        body = ", ".join(f"{k!r}: ({v})" for k, v in fields.items())
        self.build = compile_expr("{" + body + "}", left=left_fields, right=right_fields)
        self.opened: PartEvent | None = None  # watchers of its parts (``parts``): clear() keeps them
        self.closed: PartEvent | None = None
        self.clear()

    def clear(self) -> None:
        # Per side: key -> deque of (time, stime, record), in arrival (= time) order.
        self.sides: tuple[dict[Any, deque], dict[Any, deque]] = ({}, {})
        # Per side: keys in arrival order, so expiry pops the oldest without scanning keys.
        self.order: tuple[deque, deque] = (deque(), deque())
        # Per side: the time that side has reached; the other side is expired up to it - within.
        self.watermark: list[int | None] = [None, None]
        self._untracked()

    def state(self) -> object:
        return (self.sides, self.order, self.watermark)

    def set_state(self, state: object) -> None:
        self.sides, self.order, self.watermark = cast(JoinState, state)
        self._untracked()

    def _untracked(self) -> None:
        self.marked: list[int] | None = None  # per side, how many tuples were kept at the last delta()
        self.expired = [0, 0]  # per side, tuples expired since then

    def delta(self) -> object:
        """Per side, how many of the tuples kept at the last call expired since, and the tuples kept
        since in arrival order; and the watermarks. Both sides are queues (tuples leave in arrival
        order), so a copy expires that many from its head, then appends. The first call returns the
        whole state. Tracking costs nothing per tuple: the counts come from the queues' lengths."""
        marked, expired = self.marked, self.expired
        self.marked, self.expired = [len(self.order[0]), len(self.order[1])], [0, 0]
        if marked is None:
            return (True, self.state())
        sides = []
        for side in (0, 1):
            old, gone = marked[side], expired[side]
            order = self.order[side]
            new = len(order) - max(0, old - gone)  # the tuples kept since the last call that are still kept
            sides.append((min(gone, old), self._newest(side, new)))
        return (False, (sides, list(self.watermark)))

    def _newest(self, side: int, n: int) -> list[tuple[Any, tuple[int, int, Any]]]:
        """The ``n`` newest tuples kept on ``side``, in arrival order, with their keys."""
        order, state = self.order[side], self.sides[side]
        keys = [k for _, k in itertools.islice(order, len(order) - n, None)]
        per_key: dict[Any, int] = {}
        for k in keys:
            per_key[k] = per_key.get(k, 0) + 1
        tails = {k: itertools.islice(state[k], len(state[k]) - c, None) for k, c in per_key.items()}
        return [(k, next(tails[k])) for k in keys]

    def apply_delta(self, delta: object) -> None:
        full, body = cast(tuple[bool, Any], delta)
        if full:
            self.set_state(body)
            return
        sides, self.watermark = body
        for side, (gone, new) in enumerate(sides):
            order, state = self.order[side], self.sides[side]
            for _ in range(gone):
                _, k = order.popleft()
                q = state[k]
                q.popleft()
                if not q:
                    del state[k]
            for k, entry in new:
                state.setdefault(k, deque()).append(entry)
                order.append((entry[0], k))

    # -- state parts (``services.operators.parts``): a part is what one side keeps of a key, id (key, side) --
    def part_ids(self) -> list[PartId]:
        return [(k, side) for side in (0, 1) for k in self.sides[side]]

    def part(self, pid: PartId) -> object:
        k, side = pid
        return list(self.sides[side][k])

    def load_part(self, pid: PartId, state: object) -> None:
        """Put one key's tuples of one side back; the arrival order across keys is rebuilt by time, then
        stime (the order the input came in), so its head is the oldest stime (``oldest_time``) whichever
        order the parts are loaded in."""
        k, side = pid
        kept = self.sides[side]
        kept[k] = deque(cast(list[tuple[int, int, Any]], state))
        order = sorted(((e[0], e[1], key) for key, q in kept.items() for e in q), key=lambda e: (e[0], e[1]))
        self.order[side].clear()
        self.order[side].extend((t, key) for t, _, key in order)

    def watch(self, opened: PartEvent | None, closed: PartEvent | None) -> None:
        self.opened, self.closed = opened, closed

    def span(self) -> int:
        return self.within

    def oldest_time(self, port: int) -> int | None:
        """Stime of that side's oldest kept tuple (the head of its arrival order)."""
        order = self.order[port]
        return self.sides[port][order[0][1]][0][1] if order else None

    def advance(self, stime: int) -> None:
        """No tuple of either side can still match a kept tuple older than ``stime - within``: drop them."""
        wm = self.watermark
        for side in (0, 1):
            seen = wm[side]
            if seen is None or stime > seen:
                wm[side] = stime
                self._expire(1 - side, stime)

    def push(self, port: int, items: list[Item]) -> None:
        out: list[Item] = []
        other = 1 - port
        tf, kf, within, build = self.time, self.keys[port], self.within, self.build
        mine, theirs, order = self.sides[port], self.sides[other], self.order[port]
        for item in items:
            rec, stime = item
            try:  # what can fail in the tuple itself, before anything changes
                t, k = rec[tf], rec[kf]
                if t.__class__ is not int:
                    raise TypeError(f"'{tf}' must be an integer, got {t!r}")
                matches = theirs.get(k)
            except (KeyError, TypeError) as e:
                self.reject(self.name, item, reason(e))
                continue
            if matches:
                for ot, ostime, orec in matches:
                    if abs(t - ot) <= within:
                        left, right = (rec, orec) if port == 0 else (orec, rec)
                        try:
                            out.append((build(left, right), max(stime, ostime)))
                        except EVAL_ERRORS as e:  # this pair has no result; the tuple still joins others
                            self.reject(self.name, item, f"pairing with {orec!r}: {reason(e)}")
            q = mine.get(k)
            if q is None:
                q = mine[k] = deque()
                if self.opened is not None:
                    self.opened((k, port), stime)
            q.append((t, stime, rec))
            order.append((t, k))
            seen = self.watermark[port]
            if seen is None or t > seen:
                self.watermark[port] = t
                self._expire(other, t)
        if out:
            self.emit(out)

    def _expire(self, side: int, other_time: int) -> None:
        """Drop tuples of ``side`` that no future tuple of the other side can match."""
        horizon = other_time - self.within
        order, state = self.order[side], self.sides[side]
        while order and order[0][0] < horizon:
            _, k = order.popleft()
            q = state[k]
            q.popleft()
            if not q:
                del state[k]
                if self.closed is not None:
                    self.closed((k, side), horizon)
            self.expired[side] += 1
