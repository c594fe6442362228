"""Checking a spec's operators and graph: one function per operator type, then the cross-cutting rules."""

from __future__ import annotations

import re
from typing import Any, Callable

from services.core.codec import record_fields, schema_fields
from services.core.errors import ExprError, SpecError
from services.spec import checkpoint, exchanges, expr
from services.spec.classes import node_class, outcome
from services.spec.model import OPERATOR_TYPES, Aggregate, OperatorDef, Reconciliation, Spec, StreamDef
from services.spec.problems import Problems
from services.spec.schemes import Scheme

OPERATOR_KEYS = {
    "filter": {"type", "input", "output", "where"},
    "map": {"type", "input", "output", "fields"},
    "union": {"type", "inputs", "output"},
    "window": {"type", "input", "output", "key", "time", "size", "slide", "count", "aggregates"},
    "join": {"type", "left", "right", "output", "key", "right_key", "time", "within", "fields"},
}
_AGG_RE = re.compile(r"^\s*(count|sum|avg|min|max)\s*(?:\(\s*([A-Za-z_][A-Za-z0-9_]*)?\s*\))?\s*$")


def _aggregates(ck: Problems, raw: Any, path: tuple, in_fields: dict) -> tuple[Aggregate, ...]:
    raw = ck.mapping(raw, path, "aggregates")
    if not raw:
        ck.err(path, "at least one aggregate is required, e.g. {count: count, total: sum(value)}")
    aggs = []
    for out, spec in raw.items():
        m = _AGG_RE.match(str(spec))
        if not m:
            ck.err(path + (out,), f"aggregate {spec!r} must be one of count, sum(f), avg(f), min(f), max(f)")
            continue
        func, fld = m.group(1), m.group(2)
        if func != "count" and not fld:
            ck.err(path + (out,), f"{func} needs a field: {func}(<field>)")
            continue
        if fld and fld not in in_fields:
            ck.err(path + (out,), f"unknown field '{fld}' (fields: {', '.join(in_fields)})")
            continue
        aggs.append(Aggregate(str(out), func, fld))
    return tuple(aggs)


def operators(ck: Problems, top: dict, streams: dict[str, StreamDef]) -> dict[str, OperatorDef]:
    """Every operator of the spec that is valid; the problems of the others go to ``ck``."""
    raw = ck.mapping(top.get("operators"), ("operators",), "operators")
    if not raw:
        ck.err(("operators",), "at least one operator is required")
    out: dict[str, OperatorDef] = {}
    outputs: dict[str, str] = {}
    for oname, odef in raw.items():
        path = ("operators", oname)
        odef = ck.mapping(odef, path, f"operator '{oname}'")
        otype = odef.get("type")
        if otype not in OPERATOR_TYPES:
            ck.err(
                path + ("type",) if "type" in odef else path,
                f"'type' must be one of {', '.join(OPERATOR_TYPES)}, got {otype!r}",
            )
            continue
        ck.unknown_keys(odef, OPERATOR_KEYS[otype], path)
        inputs = _inputs(ck, odef, otype, path)
        output = odef.get("output")
        ok = _streams_exist(ck, inputs, otype, path, streams)
        if not isinstance(output, str):
            ck.err(path, "'output' (a stream name) is required")
            continue
        if output not in streams:
            ck.err(path + ("output",), f"unknown stream '{output}' (streams: {', '.join(streams)})")
            ok = False
        elif output in outputs:
            ck.err(path + ("output",), f"stream '{output}' is already the output of operator '{outputs[output]}'")
        elif output in inputs:
            ck.err(path + ("output",), f"operator reads and writes the same stream '{output}'")
        outputs.setdefault(output, oname)
        if not ok or any(not isinstance(s, str) for s in inputs):
            continue
        op = _Op(ck, path, odef, tuple(inputs), output, streams)
        kw = _BY_TYPE[otype](op)
        out[oname] = OperatorDef(oname, otype, tuple(inputs), output, **kw)
    return out


def _inputs(ck: Problems, odef: dict, otype: str, path: tuple) -> list:
    if otype == "union":
        return ck.name_list(odef.get("inputs"), path + ("inputs",), "'inputs'")
    if otype == "join":
        for side in ("left", "right"):
            if not isinstance(odef.get(side), str):
                ck.err(path, f"'{side}' (a stream name) is required")
        return [odef.get("left"), odef.get("right")]
    inputs = ck.name_list(odef.get("input"), path + ("input",), "'input'")
    if len(inputs) > 1:
        ck.err(path + ("input",), f"a {otype} reads one stream; use a union for several")
    return inputs


def _streams_exist(ck: Problems, inputs: list, otype: str, path: tuple, streams: dict[str, StreamDef]) -> bool:
    ok = True
    for i, s in enumerate(inputs):
        if isinstance(s, str) and s not in streams:
            where = {"union": "inputs", "join": ("left", "right")[min(i, 1)]}.get(otype, "input")
            ck.err(path + (where,), f"unknown stream '{s}' (streams: {', '.join(streams)})")
            ok = False
    return ok


class _Op:
    """One operator definition being checked, with the schemas around it."""

    def __init__(
        self, ck: Problems, path: tuple, odef: dict, inputs: tuple[str, ...], output: str, streams: dict[str, StreamDef]
    ) -> None:
        self.ck, self.path, self.odef, self.inputs, self.output, self.streams = ck, path, odef, inputs, output, streams
        self.in_fields = schema_fields(streams[inputs[0]].schema)
        self.out_schema = streams[output].schema
        self.out_fields = schema_fields(self.out_schema)
        self.required_out = {f["name"] for f in record_fields(self.out_schema) if "default" not in f}

    def err(self, sub: tuple, msg: str) -> None:
        self.ck.err(self.path + sub, msg)

    def same_schema(self, what: str) -> None:
        for s in self.inputs:
            if self.streams[s].schema != self.out_schema:
                self.err(
                    ("output",),
                    f"a {what} keeps its input schema: '{s}' is '{self.streams[s].schema}' "
                    f"but '{self.output}' is '{self.out_schema}'",
                )

    def fields(self, scopes: dict[str, Any] | None) -> dict[str, str]:
        """The ``fields`` mapping: output field -> expression over the input (``scopes`` for a join)."""
        fields = self.ck.mapping(self.odef.get("fields"), self.path + ("fields",), "fields")
        for fname, fexpr in fields.items():
            if fname not in self.out_fields:
                self.err(
                    ("fields", fname),
                    f"field '{fname}' is not in output schema '{self.out_schema}' "
                    f"(fields: {', '.join(self.out_fields)})",
                )
                continue
            try:
                if scopes is not None:
                    expr.validate(str(fexpr), **scopes)
                else:
                    expr.validate(str(fexpr), self.in_fields)
            except ExprError as e:
                self.err(("fields", fname), str(e))
        missing = self.required_out - set(fields)
        if fields and missing:
            self.err(("fields",), f"output schema '{self.out_schema}' also needs: {', '.join(sorted(missing))}")
        if not fields:
            self.ck.err(self.path, "'fields' (output field -> expression) is required")
        return {str(k): str(v) for k, v in fields.items()}

    def time_and_key(self) -> dict[str, Any]:
        """The event-time field of every input and the key of a window or join."""
        odef = self.odef
        time_f = odef.get("time", "ts")
        for s in self.inputs:
            f = schema_fields(self.streams[s].schema)
            if time_f not in f or f[time_f] not in ("long", "int"):
                self.err(("time",) if "time" in odef else (), f"time field '{time_f}' must be a long field of '{s}'")
        key = odef.get("key")
        if not isinstance(key, str) or key not in self.in_fields:
            self.err(
                ("key",) if "key" in odef else (),
                f"'key' must name a field of '{self.inputs[0]}' (fields: {', '.join(self.in_fields)})",
            )
        return {"time": time_f, "key": key}


def _filter(op: _Op) -> dict[str, Any]:
    op.same_schema("filter")
    where = op.odef.get("where")
    if where is None:
        op.ck.err(op.path, "'where' (a predicate over the input fields) is required")
        return {}
    try:
        expr.validate(str(where), op.in_fields)
    except ExprError as e:
        op.err(("where",), str(e))
    return {"where": str(where)}


def _map(op: _Op) -> dict[str, Any]:
    return {"fields": op.fields(None)}


def _union(op: _Op) -> dict[str, Any]:
    op.same_schema("union")
    return {}


def _window(op: _Op) -> dict[str, Any]:
    ck, path, odef = op.ck, op.path, op.odef
    kw = op.time_and_key()
    if "count" in odef:
        kw.update(_count(op))
    else:
        kw["size"] = ck.pos_int(odef, "size", path)
        kw["slide"] = ck.pos_int(odef, "slide", path, kw["size"])
        if kw["slide"] > kw["size"]:
            op.err(
                ("slide",), f"slide {kw['slide']} is larger than size {kw['size']}: tuples would fall between windows"
            )
        elif kw["size"] % kw["slide"]:
            op.err(("slide",), f"size {kw['size']} must be a multiple of slide {kw['slide']}")
    aggs = _aggregates(ck, odef.get("aggregates"), path + ("aggregates",), op.in_fields)
    kw["aggregates"] = aggs
    produced = {"key", "window_start", "window_end"} | {a.out for a in aggs}
    for f in sorted(produced - set(op.out_fields)):
        op.err(("aggregates",), f"window output field '{f}' is not in output schema '{op.out_schema}'")
    if op.required_out - produced:
        op.err(
            ("aggregates",),
            f"output schema '{op.out_schema}' also needs: {', '.join(sorted(op.required_out - produced))}",
        )
    return kw


def _count(op: _Op) -> dict[str, Any]:
    """A count-based window (``count: N``): each key's window closes with its N-th tuple; no size or slide."""
    for k in ("size", "slide"):
        if k in op.odef:
            op.err((k,), f"a window with 'count' closes by count, not by time: remove '{k}'")
    return {"count": op.ck.pos_int(op.odef, "count", op.path)}


def _join(op: _Op) -> dict[str, Any]:
    left, right = (schema_fields(op.streams[s].schema) for s in op.inputs[:2])
    kw: dict[str, Any] = {"fields": op.fields({"left": left, "right": right})}
    kw.update(op.time_and_key())
    rk = op.odef.get("right_key", kw.get("key"))
    if rk not in right:
        op.ck.err(
            op.path + ("right_key",) if "right_key" in op.odef else op.path,
            f"right key '{rk}' is not a field of '{op.inputs[1]}'",
        )
    kw["right_key"] = rk
    kw["within"] = op.ck.pos_int(op.odef, "within", op.path, minimum=0)
    return kw


_BY_TYPE: dict[str, Callable[[_Op], dict[str, Any]]] = {
    "filter": _filter,
    "map": _map,
    "union": _union,
    "window": _window,
    "join": _join,
}


def graph(ck: Problems, spec: Spec) -> None:
    """Cross-cutting checks: cycles, co-partitioning, keys of partitioned state, HA guarantees."""
    try:
        spec.topo_nodes()
        for n in spec.nodes:
            spec.topo_operators(n)
    except SpecError as e:
        ck.err(("nodes",), e.problems[0])
        return
    for s in spec.streams:
        if spec.producer_of(s) is None and not spec.consumers_of(s):
            ck.err(("streams", s), f"stream '{s}' is neither produced nor read by any operator")
        writer = spec.producer_of(s)
        if spec.streams[s].topic and writer is not None:
            ck.err(
                ("streams", s, "topic"),
                f"stream '{s}' is written by operator '{writer.name}': only a source may name a shared "
                "'topic' (a node's output topics are <name>.<stream>.r<replica>)",
            )
    for at, why in exchanges.problems(spec):
        ck.err(at, why)
    for n in spec.nodes:
        p = spec.node_partitions(n)
        if (q := spec.nodes[n].processes) is not None and q > p:
            ck.err(("nodes", n, "processes"), f"node '{n}' has {p} partitions: 'processes' may be 1 to {p}, got {q}")
        for o in spec.nodes[n].operators:
            op = spec.operators[o]
            if p > 1 and op.type in exchanges.KEYED:
                for s, k in zip(op.inputs, (op.key, op.right_key), strict=False):
                    has = exchanges.inner_split(spec, n, s)
                    if has != k:
                        ck.err(
                            ("operators", o, "key"),
                            f"with {p} partitions, stream '{s}' must be keyed by '{k}' so each key's state lives in one partition (it is split by {has!r})",
                        )
    guarantees(ck, spec)
    undo_rebuilds(ck, spec)
    checkpoint.one_window(ck, spec)


def undo_rebuilds(ck: Problems, spec: Spec) -> None:
    """Undo/redo rebuilds a window from the first tuple of the oldest one still open (``services.dpc.undo``):
    a count window's windows would not realign from there."""
    for n, nd in spec.nodes.items():
        counts = [o for o in nd.operators if spec.operators[o].count]
        if counts and nd.ha.scheme is Scheme.DPC and spec.reconciliation_of(n) is Reconciliation.UNDO:
            at = ("nodes", n, "reconciliation") if nd.reconciliation is not None else ("dpc", "reconciliation")
            ck.err(
                at,
                f"node '{n}' reconciles by undo/redo, which cannot rebuild count window '{counts[0]}' (counted from "
                "its oldest open window, the windows would not realign): use reconciliation: checkpoint",
            )


def guarantees(ck: Problems, spec: Spec) -> None:
    """Each HA node's requested recovery must be one its scheme gives for its operator class (Table 2)."""
    for n, nd in spec.nodes.items():
        if nd.ha.scheme.kind.recovery is None:
            continue  # no recovery type to check (DPC: eventual consistency)
        c = node_class(spec, n)
        got = outcome(nd.ha.scheme, nd.ha.guarantee, c.cls)
        if isinstance(got, str):
            ck.err(("nodes", n, "ha"), f"node '{n}' is {c.cls.label} ({c.why}): {got}")
