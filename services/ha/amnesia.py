"""Amnesia (ICDE 2005, section 4): the standby takes over empty, at the inputs' current end.

The secondary reads nothing and holds no state, so the scheme costs nothing while there is
no failure. When the coordinator makes it primary it starts every input where the log ends
at that moment and processes the tuples as they arrive: what the old primary had not
finished (its state, and the input that came between its failure and the takeover) is lost,
one contiguous gap in the output (gap recovery), and no result is delayed by the recovery.

Its results never differ from the failure-free run's: a window (or a join) open at the failure
would come out partial, missing what came before the inputs' end, so nothing is written below
the first boundaries read after the takeover moved on by the node's span (``NodePipeline.span``):
every tuple before them is earlier in its log than the inputs' end, and a result from there on
has all its input. Those windows are lost with the rest of the gap. A count window is the
exception: it counts each key's windows from the takeover, and they never realign with the
failure-free run's (gap recovery as the paper defines it, whose aggregates may be wrong).
"""

from __future__ import annotations

from confluent_kafka import OFFSET_END

from services.ha.scheme import HaScheme
from services.node.scheme import NodeRuntime


class AmnesiaScheme(HaScheme):
    def __init__(self, node: NodeRuntime) -> None:
        super().__init__(node)
        self.warming = False  # a new primary that has not read a boundary of every input yet

    def on_promote(self) -> dict[str, int]:
        self.continue_log()
        ports = self.node.inputs.ports
        for p in ports:
            p.midway = True
        # after a primary that wrote (a first start loses nothing); a stateless node's results are whole
        wrote = any(so.next_id > 0 or so.boundary_sent >= 0 for so in self.path.soutputs.values())
        self.warming = wrote and self.node.pipeline.span > 0
        return {p.topic: OFFSET_END for p in ports}

    def after_batch(self, now: float, idle: bool) -> None:
        if self.warming:
            self._drop_open_windows()
        super().after_batch(now, idle)

    def _drop_open_windows(self) -> None:
        """Once every input gave a boundary (the merge waits for them before any result): nothing below
        the newest, moved on by the node's span, so no window open at the failure comes out partial."""
        bounds = self.path.sunion.boundaries
        if any(b is None for b in bounds):
            return
        floor = max(b for b in bounds if b is not None) + self.node.pipeline.span
        for so in self.path.soutputs.values():
            so.floor = floor if so.floor is None else max(so.floor, floor)
        self.warming = False
