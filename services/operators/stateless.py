"""Filter, map and union: per-tuple operators with no state."""
from __future__ import annotations

from typing import Iterable

from services.core.expr import compile_expr
from services.operators.base import Operator, Record


class Filter(Operator):
    def __init__(self, name: str, where: str, fields: Iterable[str]) -> None:
        super().__init__(name)
        self.pred = compile_expr(where, fields)

    def push(self, port: int, rec: Record, stime: int) -> None:
        if self.pred(rec):
            self.emit(rec, stime)


class Map(Operator):
    """Builds each output record from one expression per output field."""

    def __init__(self, name: str, fields: dict[str, str], in_fields: Iterable[str]) -> None:
        super().__init__(name)
        # One compiled dict display builds the whole record: no per-field call overhead.
        body = ", ".join(f"{k!r}: ({v})" for k, v in fields.items())
        self.build = compile_expr("{" + body + "}", in_fields)

    def push(self, port: int, rec: Record, stime: int) -> None:
        self.emit(self.build(rec), stime)


class Union(Operator):
    """Merges its inputs in arrival order (SUnion adds a deterministic order)."""

    def push(self, port: int, rec: Record, stime: int) -> None:
        self.emit(rec, stime)
