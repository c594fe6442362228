"""A changelog of the window's parts as a node's state store (``state: changelog``): what Kafka Streams and
Quix Streams keep, CEC's rival.

After each stable run of input, every part a tuple went into is written whole to the replica's compacted
restart topic, keyed by the part's id, and every part that closed gets a tombstone; a position record
says the last input id the parts hold. They go with the run's results in the batch's transaction
(``Outputs.side``), so the changelog, the position and the output log always agree. A restart reads the
whole changelog partition back (compaction keeps the newest record per key, but only of closed
segments: the rest is read too), loads the parts, and replays the input after the position; the
output's ids go on after its log's last, as with CEC.

While the node is in an upstream failure nothing is written (the tentative state is rolled back).
"""

from __future__ import annotations

import logging
import pickle
import time
from typing import Any, cast

from confluent_kafka import TopicPartition

from services.log.tail import range_consumer, read_range
from services.node import restart
from services.node.path import StablePath
from services.node.scheme import NodeRuntime
from services.node.state import RECOVERY_S, RecoveryPoint, replay_point
from services.operators.parts import PartId, Replayable

log = logging.getLogger(__name__)

POSITION = b"position"  # the key of the record of the last input id the parts hold
PART = b"part:"  # what a part's key starts with (its pickled id follows)


class ChangelogStore:
    """Writes the window's changed parts after each stable run; recovers them (see the module's docstring)."""

    restores = True  # ``recover`` leaves the state in the operators
    busy = False

    def __init__(self, node: NodeRuntime, topic: str, path: StablePath) -> None:
        self.node, self.topic, self.path = node, topic, path
        (op,) = node.pipeline.operators  # one window (``services.spec.checkpoint``)
        self.op = cast(Replayable, op)
        self.entry = path.entries[0]
        self.touched: set[PartId] = set()  # parts a tuple went into since the last collect
        self.closed: set[PartId] = set()
        self.last_id = -1  # the input id of the last tuple pushed
        self.written_id = -1  # ... whose parts are written
        path.entries[0] = self.push
        path.checkpointed = self
        self.resume()

    def _touch(self, pid: PartId) -> bool:
        self.touched.add(pid)
        return True

    def _close(self, pid: PartId, stime: int) -> None:
        self.closed.add(pid)

    # -- the stable path's side (``services.node.path.Checkpointed``) ------------------------
    def push(self, items: list[Any]) -> None:
        self.entry(items)
        self.last_id = self.path.first_id + len(items) - 1

    def collect(self) -> None:
        if self.last_id == self.written_id and not self.closed:
            return
        op, side, topic, part = self.op, self.node.outputs.side, self.topic, self.node.partition
        for pid in self.touched - self.closed:  # a closed part never opens again: a new one has a new id
            side.append((topic, part, _key(pid), pickle.dumps(op.part(pid), protocol=pickle.HIGHEST_PROTOCOL)))
        for pid in self.closed:
            side.append((topic, part, _key(pid), None))
        side.append((topic, part, POSITION, b"%d" % self.last_id))
        self.touched.clear()
        self.closed.clear()
        self.written_id = self.last_id

    def pause(self) -> None:
        self.op.admit = None
        self.op.watch(None, None)

    def resume(self) -> None:
        self.op.admit = self._touch
        self.op.watch(None, self._close)

    def background(self, now: float) -> None:
        """Nothing: every run's changes are written with it."""

    # -- the store's side (``services.node.state.StateStore``) -------------------------------
    def take(self, point: RecoveryPoint) -> None:
        """Nothing to keep: the changelog holds every recovery point already."""

    def wait(self) -> None:
        """Nothing is written in the background."""

    def new_chain(self) -> None:
        """Each recovery reads the changelog alone."""

    def written(self) -> RecoveryPoint | None:
        return None

    def recover(self) -> restart.RestartImage | None:
        """The parts read back from the changelog, the input to replay from after the position, the output's
        next id after its log's last; None when the changelog holds no position yet."""
        node = self.node
        bootstrap = node.settings.bootstrap
        t0 = time.monotonic()
        with node.working(RECOVERY_S):
            parts, last, read = _read(bootstrap, self.topic, node.partition)
        if last is None:
            return None
        for pid, state in parts.items():
            self.op.load_part(pid, state)
        self.last_id = self.written_id = last
        log.info(
            "read %d changelog records of %s[%d] back in %.0f ms: %d parts; replaying after input id %d",
            read,
            self.topic,
            node.partition,
            (time.monotonic() - t0) * 1000,
            len(parts),
            last,
        )
        return replay_point(node, self.path, last)


def _key(pid: PartId) -> bytes:
    return PART + pickle.dumps(pid, protocol=pickle.HIGHEST_PROTOCOL)


def _read(bootstrap: str, topic: str, partition: int) -> tuple[dict[PartId, Any], int | None, int]:
    """The newest state of each part not closed, the last position, and how many records were read."""
    c = range_consumer(bootstrap, "changelog")
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        newest: dict[bytes, bytes | None] = {}
        read = 0
        for m in read_range(c, topic, partition, low, high):
            key = m.key()
            if key is not None:
                newest[key] = m.value()
                read += 1
    finally:
        c.close()
    position = newest.pop(POSITION, None)
    skip = len(PART)
    parts = {pickle.loads(k[skip:]): pickle.loads(v) for k, v in newest.items() if v is not None and k.startswith(PART)}
    return parts, (int(position) if position is not None else None), read
