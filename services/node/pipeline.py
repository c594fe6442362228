"""A node's operators wired together in process; only the node's outputs reach Kafka."""
from __future__ import annotations

from services.core.spec import Spec
from services.operators.base import Emit, Item, Operator
from services.operators.build import build_operator


class NodePipeline:
    """Feed batches of input tuples per stream; collect output tuples per output stream."""

    def __init__(self, spec: Spec, node: str) -> None:
        self.spec, self.node = spec, node
        self.operators: list[Operator] = []
        self.outputs: dict[str, list[Item]] = {s: [] for s in spec.node_outputs(node)}
        self.routes: dict[str, list[Emit]] = {}
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
                targets.append(self.outputs[d.output].extend)
            ops[d.name].emit = _fanout(targets)
        self.inputs = spec.node_inputs(node)

    def entry(self, stream: str) -> Emit:
        """The function that feeds batches of one input stream's tuples into the node."""
        return _fanout(self.routes[stream])

    def drain(self) -> dict[str, list[Item]]:
        """Output tuples produced since the last drain, per output stream."""
        out = {}
        for s, buf in self.outputs.items():
            if buf:
                out[s] = buf[:]
                buf.clear()
        return out


def _port_push(op: Operator, port: int) -> Emit:
    push = op.push
    return lambda items: push(port, items)


def _fanout(targets: list[Emit]) -> Emit:
    if len(targets) == 1:
        return targets[0]

    def emit(items: list[Item]) -> None:
        for t in targets:
            t(items)

    return emit
