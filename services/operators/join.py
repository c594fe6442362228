"""Windowed equi-join of two streams: pairs with equal keys at most ``within`` ms apart.

Symmetric hash join: each arriving tuple probes the other side's state, then is kept
until the other side's time has moved past it by more than ``within`` (inputs are in
time order per partition, so no later tuple could match it).
"""
from __future__ import annotations

from collections import deque
from typing import Any

from services.core.expr import compile_expr
from services.operators.base import Operator, Record


class WindowJoin(Operator):
    def __init__(
        self, name: str, left_key: str, right_key: str, time: str, within: int,
        fields: dict[str, str], left_fields: list[str], right_fields: list[str],
    ) -> None:
        super().__init__(name)
        self.keys = (left_key, right_key)
        self.time, self.within = time, within
        body = ", ".join(f"{k!r}: ({v})" for k, v in fields.items())
        self.build = compile_expr("{" + body + "}", left=left_fields, right=right_fields)
        # Per side: key -> deque of (time, stime, record), in arrival (= time) order.
        self.state: tuple[dict[Any, deque], dict[Any, deque]] = ({}, {})
        # Per side: keys in arrival order, so expiry pops the oldest without scanning keys.
        self.order: tuple[deque, deque] = (deque(), deque())
        self.watermark: list[int | None] = [None, None]

    def push(self, port: int, rec: Record, stime: int) -> None:
        t = rec[self.time]
        other = 1 - port
        k = rec[self.keys[port]]
        matches = self.state[other].get(k)
        if matches:
            within, build, emit = self.within, self.build, self.emit
            for ot, ostime, orec in matches:
                if abs(t - ot) <= within:
                    left, right = (rec, orec) if port == 0 else (orec, rec)
                    emit(build(left, right), max(stime, ostime))
        self.state[port].setdefault(k, deque()).append((t, stime, rec))
        self.order[port].append((t, k))
        if self.watermark[port] is None or t > self.watermark[port]:
            self.watermark[port] = t
            self._expire(other, t)

    def _expire(self, side: int, other_time: int) -> None:
        """Drop tuples of ``side`` that no future tuple of the other side can match."""
        horizon = other_time - self.within
        order, state = self.order[side], self.state[side]
        while order and order[0][0] < horizon:
            _, k = order.popleft()
            q = state[k]
            q.popleft()
            if not q:
                del state[k]
