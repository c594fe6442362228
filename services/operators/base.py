"""The operator interface: push a tuple in, emitted tuples go to ``emit``.

Operators are deterministic (the DPC assumption): the same input sequence always gives
the same output sequence, so replicas agree and a replay reproduces the output.
"""
from __future__ import annotations

from typing import Any, Callable

Record = dict[str, Any]
Emit = Callable[[Record, int], None]


def _discard(rec: Record, stime: int) -> None:
    pass


class Operator:
    """Base of all operators. ``port`` is the input index (0 unless union/join)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.emit: Emit = _discard

    def push(self, port: int, rec: Record, stime: int) -> None:
        raise NotImplementedError
