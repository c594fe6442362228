"""Operator instances from their spec definitions."""

from __future__ import annotations

from services.operators.base import Operator
from services.operators.count_window import CountWindow
from services.operators.join import WindowJoin
from services.operators.stateless import Filter, Map, Union
from services.operators.window import WindowAggregate
from services.spec import OperatorDef


def build_operator(op: OperatorDef, fields: dict[str, list[str]]) -> Operator:
    """The operator ``op`` defines; ``fields`` gives the field names of its input streams."""
    in_fields = fields[op.inputs[0]]
    if op.type == "filter":
        return Filter(op.name, op.where or "True", in_fields)
    if op.type == "map":
        return Map(op.name, op.fields, in_fields)
    if op.type == "union":
        return Union(op.name)
    if op.type == "window" and op.count:
        return CountWindow(op.name, op.key or "", op.time, op.count, op.aggregates)
    if op.type == "window":
        return WindowAggregate(op.name, op.key or "", op.time, op.size, op.slide, op.aggregates)
    if op.type == "join":
        right_fields = fields[op.inputs[1]]
        return WindowJoin(
            op.name, op.key or "", op.right_key or "", op.time, op.within, op.fields, in_fields, right_fields
        )
    raise ValueError(f"unknown operator type {op.type!r}")
