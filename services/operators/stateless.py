"""Filter, map and union: per-tuple operators with no state, applied a batch at a time."""

from __future__ import annotations

from typing import Iterable

from services.operators.base import Item, Operator, reason
from services.spec.expr import EVAL_ERRORS, compile_expr


class Filter(Operator):
    def __init__(self, name: str, where: str, fields: Iterable[str]) -> None:
        super().__init__(name)
        self.pred = compile_expr(where, fields)

    def push(self, port: int, items: list[Item]) -> None:
        pred = self.pred
        try:
            out = [it for it in items if pred(it[0])]
        except EVAL_ERRORS:
            out = []
            for it in items:  # again one by one, to reject just the tuples that fail
                try:
                    if pred(it[0]):
                        out.append(it)
                except EVAL_ERRORS as e:
                    self.reject(self.name, it, reason(e))
        if out:
            self.emit(out)


class Map(Operator):
    """Builds each output record from one expression per output field."""

    def __init__(self, name: str, fields: dict[str, str], in_fields: Iterable[str]) -> None:
        super().__init__(name)
        # One compiled dict display builds the whole record: no per-field call overhead.
        body = ", ".join(f"{k!r}: ({v})" for k, v in fields.items())
        self.build = compile_expr("{" + body + "}", in_fields)

    def push(self, port: int, items: list[Item]) -> None:
        build = self.build
        try:
            out = [(build(rec), stime) for rec, stime in items]
        except EVAL_ERRORS:
            out = []
            for it in items:  # again one by one, to reject just the tuples that fail
                try:
                    out.append((build(it[0]), it[1]))
                except EVAL_ERRORS as e:
                    self.reject(self.name, it, reason(e))
        if out:
            self.emit(out)


class Union(Operator):
    """Merges its inputs in arrival order (SUnion adds a deterministic order)."""

    def push(self, port: int, items: list[Item]) -> None:
        self.emit(items)
