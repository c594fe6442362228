"""Passive standby (ICDE 2005, section 5.1): the primary checkpoints, a warm standby follows them.

Every ``interval_ms`` (M) the primary writes a checkpoint to the node's checkpoint topic
(``<spec>.restart.<node>``, one for all replicas, compacted), consistent with the input offsets
it records: its outputs are flushed first, so a checkpoint never claims output the log does not
hold. A checkpoint is a **delta** (``restart.RestartDelta``): what the operators changed since the
previous one (``Operator.delta``: the window's changed accumulators, the join's new and expired
tuples), with SUnion, the next output ids and the input offsets whole. A **full image** goes
first after each takeover and after a failed write; instead of a delta that weighs half the
image or more (a small state that changes nearly whole every interval: the image costs no
more); and besides the delta once the deltas since the last image add up to ``IMAGE_EVERY``
images, so that a replica that joins reads at most that much more than one image. The loop only pickles: a thread writes, processing does not stop.
The input logs keep everything (HA topics have no retention, ``services.ha.logs``), so input
preservation holds without acknowledgements.

A secondary is a **warm standby**: it reads the newest image and its deltas when it becomes
secondary (a returning node's first checkpoint is the complete state), then applies each delta
as it is written (``restart.Follower``), so its operators hold the primary's state of the last
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
import pickle
import random
import time

from services.control.messages import now_ms
from services.control.states import Role
from services.ha.scheme import HaScheme
from services.node import restart
from services.node.resume import input_point
from services.node.scheme import NodeRuntime

log = logging.getLogger(__name__)

MAX_DELTAS = 1000  # deltas after one image at most: a cold takeover reads them all
IMAGE_EVERY = 4  # an image once the deltas since the last one weigh this many images


class PassiveStandbyScheme(HaScheme):
    def __init__(self, node: NodeRuntime) -> None:
        super().__init__(node)
        self.interval_s = node.plan.ha.interval_ms / 1000
        self.chain = self.seq = 0  # this primary's checkpoints: a chain of its own, numbered
        self.image_seq = 0  # the number of the last image taken
        self.delta_bytes = 0  # bytes of the deltas written since that image
        self.failed_seen = 0  # the image writer's failures already answered with an image
        self.follower: restart.Follower | None = None
        self.applied = self.taken = 0  # deltas a standby applied, images it took whole
        self.next_image = time.monotonic()  # the primary's next checkpoint

    # -- the standby ------------------------------------------------------------------
    def on_secondary(self) -> None:
        node = self.node
        if self.follower is not None:
            return None  # a later order (a new epoch): it follows whichever primary writes
        self.follower = restart.Follower(
            node.settings.bootstrap, self.restart_topic, node.partition, self._take_image, self._take_delta
        )
        return None

    def _take_image(self, image: restart.RestartImage) -> None:
        self.node.pipeline.restore(image.snapshot, image.deltas)
        self.node.tick()
        self.taken += 1

    def _take_delta(self, delta: restart.RestartDelta) -> None:
        self.node.pipeline.apply_delta(delta.operators)
        self.applied += 1

    def on_check(self, now: float) -> None:
        super().on_check(now)
        if self.follower is not None:
            self.follower.poll()

    # -- the takeover -----------------------------------------------------------------
    def on_promote(self) -> dict[str, int]:
        follower, self.follower = self.follower, None
        if follower is None:  # a cold takeover (never secondary): the newest image and its deltas
            _, offsets = self.resume.resume(undo=False)
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
        self.chain, self.seq = random.getrandbits(62) + 1, 0  # a new chain: its first checkpoint is an image
        self.next_image = time.monotonic() + self.interval_s
        return offsets

    # -- the primary's checkpoints ----------------------------------------------------
    def after_batch(self, now: float, idle: bool) -> None:
        super().after_batch(now, idle)
        if self.role is Role.PRIMARY and now >= self.next_image and not self.path.deduplicating():
            self.next_image = now + self.interval_s
            self._checkpoint()

    def _checkpoint(self) -> None:
        """A delta of everything since the last checkpoint, an image instead or besides when due."""
        node = self.node
        node.outputs.flush()
        node.producer.flush()
        point = input_point(node, self.sunion)
        outputs = {s: so.state() for s, so in self.soutputs.items()}
        operators = node.pipeline.delta()
        self.seq += 1
        images = node.images
        if self.seq > 1 and images.failed == self.failed_seen:  # else a delta may be missing: an image
            delta = restart.RestartDelta(
                operators, point.sunion, outputs, point.ports, point.offsets, now_ms(), self.chain, self.seq
            )
            data = pickle.dumps(delta, protocol=pickle.HIGHEST_PROTOCOL)
            if not self._image_instead(len(data)):
                images.write_delta(data, self.chain, self.seq)  # before an image: a follower needs no image
                self.delta_bytes += len(data)
                if not self._image_besides():
                    return
        self.image_seq, self.delta_bytes, self.failed_seen = self.seq, 0, images.failed
        snapshot = node.pipeline.snapshot(node.tick)
        state = restart.RestartImage(
            snapshot, point.sunion, outputs, point.ports, point.offsets, now_ms(), chain=self.chain, seq=self.seq
        )
        images.write(state, node.tick)  # pickled here; chunked and written in the background

    def _image_instead(self, size: int) -> bool:
        """An image rather than a delta of ``size`` bytes: one too large for a message, or one that
        weighs half the image or more (the state changed nearly whole: a small state, few keys)."""
        images = self.node.images
        return size > restart.CHUNK_BYTES or (not images.busy and 2 * size >= images.last_bytes)

    def _image_besides(self) -> bool:
        """An image after the delta: once the deltas since the last image add up to ``IMAGE_EVERY``
        images (or are many), so that a replica that joins reads at most that much more."""
        images = self.node.images
        if images.busy:
            return False  # the image in flight serves
        many = self.seq - self.image_seq >= MAX_DELTAS
        return many or self.delta_bytes >= IMAGE_EVERY * images.last_bytes
