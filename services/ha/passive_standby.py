"""Passive standby (ICDE 2005, section 5.1): the primary checkpoints, a warm standby follows them.

Every ``interval_ms`` (M) the primary writes a checkpoint to the node's checkpoint topic
(``<spec>.restart.<node>``, one for all replicas, compacted), consistent with the input offsets
it records: its outputs are flushed first, so a checkpoint never claims output the log does not
hold. Checkpoints are deltas between whole images (``services.ha.checkpoints``, the scheme's
state store). The loop only pickles: a thread writes, processing does not stop.
Input preservation: the primary's heartbeats say from which offsets a takeover replays its inputs
(the newest written checkpoint's, ``needs``) and from which id it checks its log (``keeps``); the
coordinator trims those logs no further (``services.coordinator.trims``), the paper's standby
acknowledging checkpoints so that the upstream node trims its queue.

A secondary is a **warm standby**: it reads the newest image and its deltas when it becomes
secondary (a returning node's first checkpoint is the complete state), then applies each delta
as it is written (``services.ha.follower``), so its operators hold the primary's state of the last
checkpoint. It reads no input.

At a takeover the new primary reads the checkpoints written since it last looked (a cold one, with
no follower, reads the newest image and its deltas), seeks every input to the checkpoint's offsets
and processes again what came after it. Output preservation: what the regenerated results repeat
of the log's tail is dropped, each checked to be the very tuple the log holds under its id
(``SOutput.restarted``); a node whose processing is deterministic (hastream merges an HA node's
inputs in tuple-time order) regenerates exactly that, so the recovery is precise. It costs the
replay of what came since the checkpoint (about M/2 of input on average).
"""

from __future__ import annotations

import logging
import time

from services.control.states import Role
from services.ha.follower import Follower
from services.ha.scheme import HaScheme
from services.node import restart
from services.node.scheme import NodeRuntime
from services.node.state import RecoveryPoint, build_store, input_point

log = logging.getLogger(__name__)


class PassiveStandbyScheme(HaScheme):
    def __init__(self, node: NodeRuntime) -> None:
        super().__init__(node)
        self.interval_s = node.plan.ha.interval_ms / 1000
        self.store = build_store(node, self.restart_topic, self.path)  # the plan's (``state:``): checkpoints
        self.follower: Follower | None = None
        self.applied = self.taken = 0  # deltas a standby applied, images it took whole
        self.next_image = time.monotonic()  # the primary's next checkpoint

    # -- the standby ------------------------------------------------------------------
    def on_secondary(self) -> None:
        node = self.node
        if self.follower is not None:
            return None  # a later order (a new epoch): it follows whichever primary writes
        self.follower = Follower(
            node.settings.bootstrap, self.restart_topic, node.partition, self._take_image, self._take_delta
        )
        return None

    def _take_image(self, image: restart.RestartImage) -> None:
        self.node.pipeline.restore(image.snapshot, image.deltas)
        self.node.tick()
        self.taken += 1
        self.node.set_standby(checkpoint_ms=image.taken_ms)

    def _take_delta(self, delta: restart.RestartDelta) -> None:
        self.node.pipeline.apply_delta(delta.operators)
        self.applied += 1
        self.node.set_standby(checkpoint_ms=delta.taken_ms)

    def on_check(self, now: float) -> None:
        super().on_check(now)
        if self.follower is not None:
            self.follower.poll()

    # -- the takeover -----------------------------------------------------------------
    def on_promote(self) -> dict[str, int]:
        self.node.set_standby()  # a primary: no longer behind anyone
        follower, self.follower = self.follower, None
        if follower is None:  # a cold takeover (never secondary): the newest image and its deltas
            _, offsets = self.resume.resume(self.store, undo=False)
        else:
            try:
                state = follower.catch_up()
            finally:
                follower.close()
            if state is not None:
                log.info(
                    "the warm standby takes over at checkpoint %d (%d images and %d deltas applied as they came)",
                    state.seq,
                    self.taken,
                    self.applied,
                )
            _, offsets = self.resume.resume_from(state, undo=False, restored=True)
        self.store.new_chain()
        self.next_image = time.monotonic() + self.interval_s
        return offsets

    # -- the primary's checkpoints ----------------------------------------------------
    def after_batch(self, now: float, idle: bool) -> None:
        super().after_batch(now, idle)
        if self.role is Role.PRIMARY and now >= self.next_image and not self.path.deduplicating():
            self.next_image = now + self.interval_s
            self._checkpoint()
        written = self.store.written() if self.role is Role.PRIMARY else None
        if written is not None:  # a takeover now starts at this checkpoint or a later one
            self.node.set_keeps({s: next_id for s, (next_id, _) in written.outputs.items()})
            self.node.set_needs(written.inputs.offsets)

    def _checkpoint(self) -> None:
        """Its outputs flushed first, so a checkpoint never claims output the log does not hold."""
        node = self.node
        node.outputs.flush()
        node.producer.flush()
        outputs = {s: so.state() for s, so in self.path.soutputs.items()}
        self.store.take(RecoveryPoint(input_point(node, self.path.sunion), outputs))
