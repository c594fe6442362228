"""A node's operators wired together in process; only the node's outputs reach Kafka.

Tuples an operator rejects (``Operator.reject``) collect in ``rejected`` as (operator,
tuple, reason) for the node to dead-letter. Besides feeding and draining, the pipeline is what the node's DPC state machine acts on:
``advance`` (time promises), ``snapshot``/``restore`` (checkpoint/redo) and, when built
with ``undo=True``, ``mark``/``undo``/``unmark`` (undo/redo with per-operator input logs), and
``held``/``due``/``flush`` for operators that compute their results in jobs (the Spark window).
"""

from __future__ import annotations

import pickle
from typing import Callable, Sequence

from services.core.pickling import dumps
from services.dpc.undo import UndoLog
from services.exchange.route import router
from services.operators.base import Emit, Item, Operator
from services.operators.build import build_operator
from services.spec import OperatorDef
from services.spec.plan import NodePlan, OutputPlan

Build = Callable[[OperatorDef, dict[str, list[str]]], Operator]


class NodePipeline:
    """Feed batches of input tuples per stream; collect output tuples per output stream."""

    def __init__(self, plan: NodePlan, undo: bool = False, build: Build = build_operator) -> None:
        self.operators: list[Operator] = []  # in topological order
        self.outputs: dict[str, list[Item]] = {o.stream: [] for o in plan.outputs}
        sinks = _sinks(plan, self.outputs)  # operator stream -> what takes its results
        self.rejected: list[tuple[str, Item, str]] = []
        self.routes: dict[str, list[Emit]] = {}
        # Undo/redo only: the stateful operators are fed through their logs. Without it the
        # operators are fed directly, so the normal path pays nothing for the feature.
        self.logs: list[UndoLog] | None = [] if undo else None
        self._advance: list[Callable[[int], None]] = []
        # Stateful operators, and per input port how far back in node-input time its tuples reach
        # (the spans of the stateful operators upstream of it): what the node's stream marker needs.
        self._ports: list[tuple[Operator, list[int]]] = []
        reach: dict[str, int] = {}
        defs = plan.operators
        ops = {d.name: build(d, plan.fields) for d in defs}
        reject = self.reject
        for d in defs:
            op = ops[d.name]
            op.reject = reject
            self.operators.append(op)
            target: Operator | UndoLog = op
            if self.logs is not None and op.stateful:
                target = UndoLog(op, len(d.inputs))
                self.logs.append(target)
            self._advance.append(target.advance)
            back = [reach.get(s, 0) for s in d.inputs]
            reach[d.output] = max(back) + op.span()
            if op.stateful:
                self._ports.append((op, back))
            for port, s in enumerate(d.inputs):
                self.routes.setdefault(s, []).append(_port_push(target, port))
        # how far back in node-input time one result reaches (the longest chain of spans to an output)
        self.span = max((reach.get(o.operand, 0) for o in plan.outputs), default=0)
        for d in defs:
            targets = list(self.routes.get(d.output, []))
            if d.output in sinks:
                targets.append(sinks[d.output])
            ops[d.name].emit = _fanout(targets)
        self.inputs = [i.operand for i in plan.inputs]
        self.holders = [op for op in self.operators if type(op).flush is not Operator.flush]

    def entry(self, stream: str) -> Emit:
        """The function that feeds batches of one input stream's tuples into the node."""
        return _fanout(self.routes[stream])

    def reject(self, op: str, item: Item, reason: str) -> None:
        """A tuple ``op`` cannot process: the node dead-letters it with ``reason`` once it is stable."""
        self.rejected.append((op, item, reason))

    def drain(self) -> dict[str, list[Item]]:
        """Output tuples produced since the last drain, per output stream."""
        out = {}
        for s, buf in self.outputs.items():
            if buf:
                out[s] = buf[:]
                buf.clear()
        return out

    def advance(self, stime: int) -> None:
        """Every future input tuple has stime >= ``stime``; afterwards no output has a smaller one.

        Upstream operators go first, so what their advance emits reaches the operators
        downstream before those advance in turn. The output sequence stays the one
        without the call; results just come out no later.
        """
        for adv in self._advance:
            adv(stime)

    def oldest_time(self) -> int | None:
        """Smallest stime of node input the operators' state still depends on: each stream marker, moved
        back by what the operators upstream of it need to regenerate the tuples it holds (a window behind
        a window needs the first one's size more). Replaying the node's input from there onto empty
        operators rebuilds the state; None if they hold nothing. The step back is in the upstream window's
        ``time`` field (its results' stime is their window's end): right when that field is the stime,
        which docs/spec.md asks of a window whose output feeds another stateful operator of its node."""
        marks = [
            t - back[port]
            for op, back in self._ports
            for port in range(len(back))
            if (t := op.oldest_time(port)) is not None
        ]
        return min(marks) if marks else None

    # -- results computed in jobs -----------------------------------------------------------
    def held(self) -> int | None:
        """Smallest stime of a result decided but not emitted yet: the node's BOUNDARY waits below it."""
        held = [h for op in self.holders if (h := op.held()) is not None]
        return min(held) if held else None

    def due(self, now: float) -> bool:
        return any(op.due(now) for op in self.holders)

    def flush(self, progress: Callable[[], None] = lambda: None) -> None:
        """Emit every held result (upstream operators first, so what they emit is held downstream in turn)."""
        for op in self.holders:
            op.flush(progress)

    # -- checkpoint/redo ------------------------------------------------------------------
    def snapshot(self, progress: Callable[[], None] = lambda: None) -> bytes:
        """Every operator's state, serialized now (later input does not change it). On large
        state ``progress`` is called as it goes, and the heartbeat thread is not kept waiting."""
        return dumps([op.state() for op in self.operators], progress)

    def delta(self) -> list[object]:
        """Every operator's changes since the previous call (``Operator.delta``), live: serialize them now."""
        return [op.delta() for op in self.operators]

    def apply_delta(self, delta: list[object]) -> None:
        """Bring the operators from the state of the previous ``delta()`` to that of this one."""
        for op, d in zip(self.operators, delta, strict=True):
            op.apply_delta(d)

    def restore(self, data: bytes, deltas: Sequence[list[object]] = ()) -> None:
        """Continue from a ``snapshot()`` and the ``delta()`` taken since, in order; undrained output
        (produced after it) is dropped.

        With undo logs, the restored state becomes their base (a restart leaves no log).
        """
        for op, state in zip(self.operators, pickle.loads(data), strict=True):
            op.set_state(state)
        for d in deltas:
            self.apply_delta(d)
        for buf in self.outputs.values():
            buf.clear()
        self.rejected.clear()
        for lg in self.logs or ():
            lg.restart()

    # -- undo/redo --------------------------------------------------------------------------
    def mark(self) -> None:
        """Call right before the first tentative tuple: ``undo()`` comes back to this state."""
        for lg in self._undo_logs():
            lg.mark()

    def undo(self) -> None:
        """Every operator back to its state at ``mark()``, emitting nothing; the mark is used up.

        Drain the tentative output first: undo leaves the buffers as they are.
        """
        for lg in self._undo_logs():
            lg.undo()

    def unmark(self) -> None:
        """Forget the mark (no undo will come, e.g. after a restart)."""
        for lg in self._undo_logs():
            lg.unmark()

    def _undo_logs(self) -> list[UndoLog]:
        if self.logs is None:
            raise RuntimeError("undo/redo needs a NodePipeline built with undo=True")
        return self.logs


def _sinks(plan: NodePlan, outputs: dict[str, list[Item]]) -> dict[str, Emit]:
    """Per output stream of the operators, where its results go: its buffer, or the router over the
    buffers of its connections where it crosses an exchange (``services.exchange.route``)."""
    by: dict[str, list[OutputPlan]] = {}
    for o in plan.outputs:
        by.setdefault(o.operand, []).append(o)
    return {s: router(os[0].route, [outputs[o.stream] for o in os]) for s, os in by.items()}


def _port_push(op: Operator | UndoLog, port: int) -> Emit:
    push = op.push
    return lambda items: push(port, items)


def _fanout(targets: list[Emit]) -> Emit:
    if len(targets) == 1:
        return targets[0]

    def emit(items: list[Item]) -> None:
        for t in targets:
            t(items)

    return emit
