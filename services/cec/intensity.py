"""How hard CEC checkpoints (CEC §III.A): targets for the extent and the replay, inside time slots.

The policy the paper evaluates: take a G^check of the part with the oldest footprint while the
extent exceeds ``q`` records or the input to replay exceeds ``u`` tuples, and only inside one slot
of ``ci_ms`` in every period of ``cp_ms`` (the checkpoint interval and period), so
checkpointing never holds the loop longer than a slot (Fig. 8: response time against CP). The
parameters never change what a recovery gives, only how long it takes: a part not checked
falls back to its older G^check or its G^open.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.spec.stores import STORES

NEVER = 2**62  # a target never exceeded: CEC_OPEN only (the paper's baseline, Fig. 5)


@dataclass(frozen=True)
class Intensity:
    q: int  # extent target, records (the paper's example: Q = 1,000)
    u: int  # replay target, input tuples (U = 1,000,000)
    ci_ms: int  # slot length (Fig. 6: CI = 5 ms)
    cp_ms: int  # slot period (CP = 100 ms)

    def next_period(self, now_ms: int) -> int:
        """When the checkpoint period after the one ``now_ms`` (a monotonic clock) falls in starts: each
        period has one slot, from the first look at it (between two batches) for ``ci_ms``."""
        return (now_ms // self.cp_ms + 1) * self.cp_ms

    def over(self, q: int, u: int) -> bool:
        """Whether the extent or the replay is past its target."""
        return q > self.q or u > self.u


DEFAULT = Intensity(**STORES["cec"].params)  # the spec's defaults (``checkpoint: {method: cec}``)
OPEN_ONLY = Intensity(NEVER, NEVER, DEFAULT.ci_ms, DEFAULT.cp_ms)
