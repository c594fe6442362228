"""Reference evaluation: what a spec's output streams must contain, computed in batch.

Written independently of the streaming operators and as plainly as possible (nested
loops, whole-input grouping), so tests can check the operators, the node service and the
Spark stage against it. Input and output are per stream, per partition lists of records
in order; each partition is evaluated on its own, as the services do, and a stream that crosses an
exchange is regrouped by its routing key for the node reading it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from services.core.codec import schema_fields
from services.core.partitioner import key_bytes, partition_for
from services.spec import OperatorDef, Spec
from services.spec.exchanges import exchange_of
from services.spec.expr import compile_expr

Records = list[dict[str, Any]]


def _aggregate(func: str, vals: list[Any], count: int, total: float) -> Any:
    if func == "count":
        return count
    if func == "sum":
        return total
    if func == "avg":
        return total / count
    return min(vals) if func == "min" else max(vals)


def _window(op: OperatorDef, recs: Records, ended: bool = False) -> Records:
    """Windows closed by the newest input time, or every window once the input has ended."""
    if not recs:
        return []
    watermark = float("inf") if ended else max(r[op.time] for r in recs)
    groups: dict[tuple[int, Any], Records] = defaultdict(list)
    for r in recs:
        t = r[op.time]
        start = (t // op.slide) * op.slide
        while start > t - op.size:
            if start + op.size <= watermark:
                groups[(start, r[op.key or ""])].append(r)
            start -= op.slide
    return [_row(op, key, start, start + op.size, groups[(start, key)]) for start, key in sorted(groups)]


def _row(op: OperatorDef, key: Any, start: int, end: int, g: Records) -> dict[str, Any]:
    """One window's result: its key, start and end, and each aggregate over its tuples ``g``."""
    row: dict[str, Any] = {"key": str(key), "window_start": start, "window_end": end}
    for a in op.aggregates:
        vals = [r[a.field] for r in g] if a.field else []
        total = 0.0
        for v in vals:
            total += v
        row[a.out] = _aggregate(a.func, vals, len(g), total)
    return row


def _count_window(op: OperatorDef, recs: Records) -> Records:
    """Each key's tuples in runs of ``count``, a row per full run, in the order the runs fill."""
    runs: dict[Any, Records] = defaultdict(list)
    out = []
    for r in recs:
        run = runs[r[op.key or ""]]
        run.append(r)
        if len(run) < op.count:
            continue
        out.append(_row(op, r[op.key or ""], run[0][op.time], r[op.time], run))
        run.clear()
    return out


def _join(spec: Spec, op: OperatorDef, left: Records, right: Records) -> Records:
    lf = list(schema_fields(spec.streams[op.inputs[0]].schema))
    rf = list(schema_fields(spec.streams[op.inputs[1]].schema))
    fns = {k: compile_expr(v, left=lf, right=rf) for k, v in op.fields.items()}
    out = []
    for lr in left:
        for rr in right:
            if lr[op.key or ""] == rr[op.right_key or ""] and abs(lr[op.time] - rr[op.time]) <= op.within:
                out.append({k: f(lr, rr) for k, f in fns.items()})
    return out


def evaluate(spec: Spec, inputs: dict[str, list[Records]], ended: bool = False) -> dict[str, list[Records]]:
    """Every stream's content per partition, given the source streams' content; ``ended``: the
    sources sent their final boundary, which closes every window."""
    data: dict[str, list[Records]] = {
        s: inputs.get(s, [[] for _ in range(spec.streams[s].partitions)]) for s in spec.sources()
    }
    pending = list(spec.operators.values())
    while pending:
        op = next(o for o in pending if all(i in data for i in o.inputs))
        pending.remove(op)
        parts = spec.streams[op.output].partitions
        in_fields = list(schema_fields(spec.streams[op.inputs[0]].schema))
        out: list[Records] = []
        split = [_split(spec, s, spec.node_of(op.name).name, data[s]) for s in op.inputs]
        for p in range(parts):
            ins = [sp[p] for sp in split]
            if op.type == "filter":
                pred = compile_expr(op.where or "True", in_fields)
                out.append([r for r in ins[0] if pred(r)])
            elif op.type == "map":
                fns = {k: compile_expr(v, in_fields) for k, v in op.fields.items()}
                out.append([{k: f(r) for k, f in fns.items()} for r in ins[0]])
            elif op.type == "union":
                out.append([r for i in ins for r in i])
            elif op.type == "window":
                out.append(_count_window(op, ins[0]) if op.count else _window(op, ins[0], ended))
            else:
                out.append(_join(spec, op, ins[0], ins[1]))
        data[op.output] = out
    return data


def _split(spec: Spec, stream: str, node: str, parts: list[Records]) -> list[Records]:
    """``stream`` per partition of ``node``: as it is, or regrouped by the key it is routed by where
    it crosses an exchange (``services.spec.exchanges``), each consumer partition taking every
    producer partition's records of its keys."""
    ex = exchange_of(spec, stream)
    if ex is None or ex.node != node:
        return parts
    if ex.key is None:
        return [[r for part in parts for r in part]]
    key = ex.key
    return [
        [r for part in parts for r in part if partition_for(key_bytes(r[key]), ex.consumers) == i]
        for i in range(ex.consumers)
    ]


def canonical(records: Records) -> list[tuple]:
    """Order-free form for streams whose order depends on input interleaving (union, join)."""
    return sorted(tuple(sorted(r.items())) for r in records)
