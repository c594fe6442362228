"""Amnesia (ICDE 2005, section 4): the standby takes over empty, at the inputs' current end.

The secondary reads nothing and holds no state, so the scheme costs nothing while there is
no failure. When the coordinator makes it primary it starts every input where the log ends
at that moment and processes the tuples as they arrive: what the old primary had not
finished (its state, and the input that came between its failure and the takeover) is lost,
one contiguous gap in the output (gap recovery), and no result is delayed by the recovery.
"""

from __future__ import annotations

from confluent_kafka import OFFSET_END

from services.ha.scheme import HaScheme


class AmnesiaScheme(HaScheme):
    def on_promote(self) -> dict[str, int]:
        self.continue_log()
        ports = self.node.inputs.ports
        for p in ports:
            p.midway = True
        return {p.topic: OFFSET_END for p in ports}
