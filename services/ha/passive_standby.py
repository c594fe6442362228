"""Passive standby (ICDE 2005, section 5.1): the primary checkpoints, the standby resumes from it.

Every ``interval_ms`` (M) the primary writes a checkpoint of its whole state to the node's
checkpoint topic (``<spec>.restart.<node>``, one for all replicas, compacted): the operators,
SUnion, the next output ids and the input offsets that state reflects. Its outputs are
flushed first, so the checkpoint never claims output the log does not hold, and the loop
only pickles the state: the chunked write runs in a thread (``services.node.restart``),
processing does not stop. The input logs keep everything (HA topics have no retention,
``services.ha.logs``), so input preservation holds without acknowledgements.

At a takeover the new primary loads the newest checkpoint, seeks every input to its offsets
and processes again what came after it. Output preservation: what the regenerated results
repeat of the log's tail is dropped, each checked to be the very tuple the log holds under
its id (``SOutput.restarted``); a node whose processing is deterministic (hastream merges an
HA node's inputs in tuple-time order) regenerates exactly that, so the recovery is precise.
It costs the replay of what came since the checkpoint (about M/2 of input on average).

Not yet: deltas between full checkpoints (each checkpoint is a full image) and a warm
standby that applies them as they come (the standby loads the checkpoint at the takeover).
"""

from __future__ import annotations

import time

from services.coordinator.takeover import Role
from services.ha.scheme import HaScheme
from services.node.scheme import NodeRuntime


class PassiveStandbyScheme(HaScheme):
    def __init__(self, node: NodeRuntime) -> None:
        super().__init__(node)
        self.interval_s = node.plan.ha.interval_ms / 1000

    def on_promote(self) -> dict[str, int]:
        _, offsets = self._resume(undo=False)  # no checkpoint: offsets is empty, every input from its start
        self.next_image = time.monotonic() + self.interval_s
        return offsets

    def after_batch(self, now: float, idle: bool) -> None:
        super().after_batch(now, idle)
        if self.role is Role.PRIMARY:
            self._image_if_due(now, self.interval_s)
