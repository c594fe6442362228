"""A node's operators wired together in process; only the node's outputs reach Kafka."""
from __future__ import annotations

from typing import Callable

from services.core.spec import Spec
from services.operators.base import Emit, Operator, Record
from services.operators.build import build_operator


class NodePipeline:
    """Push input tuples per stream; collect output tuples per output stream."""

    def __init__(self, spec: Spec, node: str) -> None:
        self.spec, self.node = spec, node
        self.operators: list[Operator] = []
        self.outputs: dict[str, list[tuple[Record, int]]] = {s: [] for s in spec.node_outputs(node)}
        self.routes: dict[str, list[Callable[[Record, int], None]]] = {}
        defs = spec.topo_operators(node)
        ops = {d.name: build_operator(spec, d) for d in defs}
        for d in defs:
            op = ops[d.name]
            self.operators.append(op)
            for port, s in enumerate(d.inputs):
                self.routes.setdefault(s, []).append(_port_push(op, port))
        for d in defs:
            targets = list(self.routes.get(d.output, []))
            if d.output in self.outputs:
                targets.append(_collect(self.outputs[d.output]))
            ops[d.name].emit = _fanout(targets)
        self.inputs = spec.node_inputs(node)

    def entry(self, stream: str) -> Emit:
        """The function that feeds one input stream's tuples into the node."""
        return _fanout(self.routes[stream])

    def drain(self) -> dict[str, list[tuple[Record, int]]]:
        """Output tuples produced since the last drain, per output stream."""
        out = {}
        for s, buf in self.outputs.items():
            if buf:
                out[s] = buf[:]
                buf.clear()
        return out


def _port_push(op: Operator, port: int) -> Emit:
    push = op.push
    return lambda rec, stime: push(port, rec, stime)


def _collect(buf: list) -> Emit:
    append = buf.append
    return lambda rec, stime: append((rec, stime))


def _fanout(targets: list[Emit]) -> Emit:
    if len(targets) == 1:
        return targets[0]

    def emit(rec: Record, stime: int) -> None:
        for t in targets:
            t(rec, stime)

    return emit
