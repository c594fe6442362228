"""Passive standby's warm standby: it follows the primary's checkpoints as they are written.

ICDE 2005, section 5.1: the secondary holds the primary's state of the last checkpoint, so a
takeover replays only what came after it.
"""

from __future__ import annotations

import time
from typing import Callable

from confluent_kafka import Message, TopicPartition

from services.core.errors import RestartImageError
from services.core.kafka import plain_consumer
from services.log.images import Manifest, assemble, delta_of, key_prefix, manifest_key
from services.log.tail import messages_between
from services.node.restart import RestartDelta, RestartImage, load_from


class Follower:
    """Follows one partition's checkpoints as they are written, so that a standby holds the newest
    state before it is needed (passive standby's warm standby).

    It starts from the newest image and its deltas (``load``), then reads on: each delta that is the
    next of its chain goes to ``on_delta``; an image it must take whole (at the start, when the
    chain changes after a takeover, or after a missing delta) goes to ``on_image`` with its deltas.
    It never takes an image of an older writer's epoch than the one it holds: a replaced primary
    that woke up may finish an image into the topic before it stops (``services.log.images``).
    ``state`` holds the rest of the newest checkpoint (SUnion, outputs, offsets), not the operators.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        on_image: Callable[[RestartImage], None],
        on_delta: Callable[[RestartDelta], None],
    ) -> None:
        self.bootstrap, self.topic, self.partition = bootstrap, topic, partition
        self.where = f"{topic}[{partition}]"
        self.prefix = key_prefix(partition)
        self.on_image, self.on_delta = on_image, on_delta
        state, start, self.epoch = load_from(bootstrap, topic, partition)
        self.state: RestartImage | None = None
        if state is not None:
            self._took(state)
        self.consumer = plain_consumer(bootstrap, "standby", unique=True, **{"fetch.wait.max.ms": 10})
        self.consumer.assign([TopicPartition(topic, partition, start)])
        self.next = start  # the offset after the last message read
        self.chunks: list[Message] = []  # the chunks read since the last manifest, for the next one

    def poll(self, timeout: float = 0.0) -> int:
        """Take what has been written since the last call; returns how many messages were read."""
        msgs = self.consumer.consume(500, timeout)
        for m in msgs:
            if m.error() is None:
                self.next = (m.offset() or 0) + 1
                self._take(m)
        return len(msgs)

    def catch_up(self, timeout: float = 10) -> RestartImage | None:
        """Take everything written up to now; returns the newest checkpoint's state."""
        _, high = self.consumer.get_watermark_offsets(TopicPartition(self.topic, self.partition), timeout=timeout)
        deadline = time.monotonic() + timeout
        while self.next < high:
            self.poll(0.01)  # consume() waits its whole timeout unless its count of messages comes
            if time.monotonic() > deadline:
                raise RestartImageError(f"{self.where}: checkpoints up to offset {high} not read in {timeout}s")
        return self.state

    def close(self) -> None:
        self.consumer.close()

    def _take(self, m: Message) -> None:
        st = self.state
        if m.key() == manifest_key(self.partition):
            man = Manifest.decode(m.value(), self.where)
            if self._newer(man):
                chunks = self._chunks_of(man, m.offset() or 0)
                self._took(assemble(man, chunks, self.partition, self.where, RestartImage))
                self.epoch = man.epoch
            self.chunks = []
            return
        d = delta_of(m, self.partition, self.where, RestartDelta)
        if d is None and (m.key() or b"").startswith(self.prefix) and m.value() is not None:
            self.chunks.append(m)
        if d is not None and st is not None and d.chain == st.chain and d.seq == st.seq + 1:
            st.advance(d)
            st.deltas.clear()
            self.on_delta(d)

    def _chunks_of(self, man: Manifest, off: int) -> list[Message]:
        """The ``man.chunks`` messages right before offset ``off``: those read on the way when they are
        all there (no new consumer per image), else read again (the follower started mid-image, or
        compaction took some before they were read)."""
        got = [c for c in self.chunks if (c.offset() or 0) >= off - man.chunks]
        if [c.offset() for c in got] == list(range(off - man.chunks, off)):
            return got
        return messages_between(self.bootstrap, self.topic, self.partition, off - man.chunks, off)

    def _newer(self, man: Manifest) -> bool:
        """Whether the image ``man`` names is newer than the state held: a later one of its chain, or one
        of another chain by a writer not older (not a replaced primary's, finished after it woke up)."""
        st = self.state
        if st is None:
            return man.epoch >= self.epoch
        return man.seq > st.seq if man.chain == st.chain else man.epoch >= self.epoch

    def _took(self, image: RestartImage) -> None:
        self.on_image(image)
        image.snapshot, image.deltas = b"", []  # applied: only the rest is kept
        self.state = image
