"""Restart images: what a node replica persists to continue after a crash without losing or duplicating output.

A replica periodically writes a ``RestartImage`` to its own restart topic
(``<spec>.restart.<node>.r<k>``, partition = the node's partition, compacted so that the
newest image per partition is kept, however old): the snapshot of its operators, its
SUnion's state, its SOutputs' next ids, which upstream replica each input reads and the
input offsets that state reflects. Outputs are flushed before, so everything the state
produced is already in the output topics. During an upstream failure the image holds the
state from before the failure and SUnion's kept buckets, so a restart goes on being in
that failure and reconciles it. A restart loads the newest image, seeks the inputs back to
its offsets and replays; SOutput checks and drops the replayed stable tuples that are
already in the output topic.

Between images, a scheme may write **deltas** (``RestartDelta``, passive standby's checkpoints):
what the operators changed since the previous checkpoint of the same chain, with the rest of
the state whole. Both are kept in the chunked image store of ``services.log.images``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.dpc.sunion import SUnionState
from services.log import images


@dataclass
class RestartImage:
    snapshot: bytes  # NodePipeline.snapshot(): every operator's state
    sunion: SUnionState
    outputs: dict[str, tuple[int, int]]  # stream -> SOutput.state(): next stable id, last boundary sent
    ports: dict[str, tuple[int, int]]  # input stream -> (replica read, last stable id)
    offsets: dict[str, int] = field(default_factory=dict)  # input topic -> next offset
    taken_ms: int = 0
    failed: bool = False  # taken during an upstream failure: ``snapshot`` is the state before it
    chain: int = 0  # the writer's sequence of checkpoints it belongs to (0: no deltas follow it)
    seq: int = 0  # its number in that sequence
    deltas: list[list[object]] = field(default_factory=list)  # operator deltas read after it, to apply in order

    def advance(self, delta: RestartDelta) -> None:
        """Bring the image forward by the next delta of its chain."""
        self.deltas.append(delta.operators)
        self.sunion, self.outputs, self.ports, self.offsets = delta.sunion, delta.outputs, delta.ports, delta.offsets
        self.taken_ms, self.seq = delta.taken_ms, delta.seq


@dataclass
class RestartDelta:
    """A checkpoint between images: the operators' changes since checkpoint ``seq - 1`` of ``chain``
    (``NodePipeline.delta``), the rest whole (it is small), consistent with ``offsets`` and with
    outputs already delivered, as an image is."""

    operators: list[object]
    sunion: SUnionState
    outputs: dict[str, tuple[int, int]]
    ports: dict[str, tuple[int, int]]
    offsets: dict[str, int]
    taken_ms: int
    chain: int
    seq: int


def load(bootstrap: str, topic: str, partition: int) -> RestartImage | None:
    """The newest complete restart image of one node replica partition, brought forward by the deltas
    of its chain that follow it (``RestartImage.deltas``), or None."""
    return load_from(bootstrap, topic, partition)[0]


def load_from(bootstrap: str, topic: str, partition: int) -> tuple[RestartImage | None, int, int]:
    """The newest state (``load``), the offset after the last message read and its writer's epoch."""
    image, deltas, after, epoch = images.load(bootstrap, topic, partition, RestartImage, RestartDelta)
    if image is not None:
        for d in deltas:
            image.advance(d)
    return image, after, epoch
