"""Passive standby's store (ICDE 2005, section 5.1): checkpoints as deltas between whole images.

A checkpoint is a **delta** (``restart.RestartDelta``): what the operators changed since the
previous one (``Operator.delta``: the window's changed accumulators, the join's new and expired
tuples), with SUnion, the next output ids and the input offsets whole. A **full image** goes
first in each primary's chain (after each takeover) and after a failed write; instead of a delta
that weighs half the image or more (a small state that changes nearly whole every interval: the
image costs no more); and besides the delta once the deltas since the last image add up to
``IMAGE_EVERY`` images, so that a replica that joins reads at most that much more than one image.
Both go to the node's one checkpoint topic (``services.log.images``), written by a thread.
"""

from __future__ import annotations

import pickle
import random

from services.control.messages import now_ms
from services.log.retention import CHUNK_BYTES
from services.node import restart
from services.node.path import StablePath
from services.node.scheme import NodeRuntime
from services.node.state import RecoveryPoint, WrittenPoints

MAX_DELTAS = 1000  # deltas after one image at most: a cold takeover reads them all
IMAGE_EVERY = 4  # an image once the deltas since the last one weigh this many images


class Checkpoints:
    """A ``StateStore``: one primary's chain of checkpoints, numbered, each a delta or an image."""

    restores = False

    def __init__(self, node: NodeRuntime, topic: str, path: StablePath | None = None) -> None:
        self.node, self.topic = node, topic
        self.chain = self.seq = 0  # this primary's checkpoints: a chain of its own, numbered
        self.image_seq = 0  # the number of the last image taken
        self.delta_bytes = 0  # bytes of the deltas written since that image
        self.failed_seen = 0  # the image writer's failures already answered with an image
        self.points = WrittenPoints(node)

    @property
    def busy(self) -> bool:
        return self.node.images.busy

    def new_chain(self) -> None:
        """A new primary's chain: its first checkpoint is an image."""
        self.chain, self.seq = random.getrandbits(62) + 1, 0

    def take(self, point: RecoveryPoint) -> None:
        """A delta of everything since the last checkpoint, an image instead or besides when due."""
        node, inputs = self.node, point.inputs
        self.points.taken(node.images.queued + 1, point)
        operators = node.pipeline.delta()
        self.seq += 1
        images = node.images
        if self.seq > 1 and images.failed == self.failed_seen:  # else a delta may be missing: an image
            delta = restart.RestartDelta(
                operators, inputs.sunion, point.outputs, inputs.ports, inputs.offsets, now_ms(), self.chain, self.seq
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
            snapshot,
            inputs.sunion,
            point.outputs,
            inputs.ports,
            inputs.offsets,
            now_ms(),
            chain=self.chain,
            seq=self.seq,
        )
        images.write(state, node.tick)  # pickled here; chunked and written in the background

    def recover(self) -> restart.RestartImage | None:
        """The newest image brought forward by its deltas (a cold takeover)."""
        node = self.node
        return restart.load(node.settings.bootstrap, self.topic, node.partition)

    def wait(self) -> None:
        self.node.images.wait()

    def written(self) -> RecoveryPoint | None:
        return self.points.newest()

    def _image_instead(self, size: int) -> bool:
        """An image rather than a delta of ``size`` bytes: one too large for a message, or one that
        weighs half the image or more (the state changed nearly whole: a small state, few keys)."""
        images = self.node.images
        return size > CHUNK_BYTES or (not images.busy and 2 * size >= images.last_bytes)

    def _image_besides(self) -> bool:
        """An image after the delta: once the deltas since the last image add up to ``IMAGE_EVERY``
        images (or are many), so that a replica that joins reads at most that much more."""
        images = self.node.images
        if images.busy:
            return False  # the image in flight serves
        many = self.seq - self.image_seq >= MAX_DELTAS
        return many or self.delta_bytes >= IMAGE_EVERY * images.last_bytes
