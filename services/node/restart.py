"""Restart images: what a node replica persists to continue after a crash without losing or duplicating output.

A replica periodically writes one message to its own restart topic
(``<spec>.restart.<node>.r<k>``, partition = the node's partition, compacted: the newest
image per partition is kept, however old): a ``RestartImage`` with the snapshot of its
operators, its SUnion's state, its SOutputs' next ids, which upstream replica each input
reads and the input offsets that state reflects. Outputs are flushed before, so everything
the state produced is already in the output topics. During an upstream failure the image
holds the state from before the failure and SUnion's kept buckets, so a restart goes on
being in that failure and reconciles it. A restart loads the newest image, seeks the
inputs back to its offsets and replays; SOutput checks and drops the replayed stable
tuples that are already in the output topic.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

from services.core.errors import RestartImageError
from services.core.kafka import BatchProducer
from services.dpc.sunion import SUnionState
from services.log.tail import last_message

# Kafka messages carry at most this much (topic max.message.bytes and producer limit).
MAX_IMAGE_BYTES = 64 * 1024 * 1024
TOPIC_CONFIG = {
    "max.message.bytes": str(MAX_IMAGE_BYTES),
    "cleanup.policy": "compact",  # the newest image per partition stays, however old
    "segment.ms": str(60_000),  # only closed segments are compacted: roll them often
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": str(60_000),
}


@dataclass
class RestartImage:
    snapshot: bytes  # NodePipeline.snapshot(): every operator's state
    sunion: SUnionState
    outputs: dict[str, tuple[int, int]]  # stream -> SOutput.state(): next stable id, last boundary sent
    ports: dict[str, tuple[int, int]]  # input stream -> (replica read, last stable id)
    offsets: dict[str, int] = field(default_factory=dict)  # input topic -> next offset
    taken_ms: int = 0
    failed: bool = False  # taken during an upstream failure: ``snapshot`` is the state before it


def save(producer: BatchProducer, topic: str, partition: int, image: RestartImage) -> int:
    """Write ``image``; returns its size in bytes. The caller flushes."""
    data = pickle.dumps(image, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > MAX_IMAGE_BYTES:
        raise RestartImageError(
            f"restart image of {len(data)} bytes exceeds {MAX_IMAGE_BYTES}: shrink windows or partition more"
        )
    producer.send(topic, data, b"p%d" % partition, partition)
    return len(data)


def load(bootstrap: str, topic: str, partition: int) -> RestartImage | None:
    """The newest restart image of one node replica partition, or None."""
    m = last_message(bootstrap, topic, partition)
    data = m.value() if m is not None else None
    if not data:
        return None
    image = pickle.loads(data)
    if not isinstance(image, RestartImage):
        raise RestartImageError(f"{topic}[{partition}] holds a {type(image).__name__}, not a restart image")
    return image
