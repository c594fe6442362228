"""The operator interface: push a batch of tuples in, emitted batches go to ``emit``.

Tuples travel as lists of ``(record, stime)`` so that a stateless operator handles a whole
batch in one comprehension instead of a chain of calls per tuple. A batch is a run of
consecutive tuples of one input, in arrival order.

Operators are deterministic (the DPC assumption): the same input sequence always gives
the same output sequence, so replicas agree and a replay reproduces the output.
"""
from __future__ import annotations

from typing import Any, Callable

Record = dict[str, Any]
Item = tuple[Record, int]  # (record, stime)
Emit = Callable[[list[Item]], None]


def _discard(items: list[Item]) -> None:
    pass


class Operator:
    """Base of all operators. ``port`` is the input index (0 unless union/join)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.emit: Emit = _discard

    def push(self, port: int, items: list[Item]) -> None:
        raise NotImplementedError
