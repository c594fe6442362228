"""Persisted node checkpoints, for restarting a killed replica without losing or duplicating output.

A node replica in STABLE state periodically writes one message to its own checkpoint
topic (``<spec>.ckpt.<node>.r<k>``, partition = the node's partition): the pickled state
of its SUnion and operators, its SOutputs' next ids, which upstream replica each input
reads and the input offsets that state reflects. Outputs are flushed before, so
everything the state produced is already in the output topics. A restart loads the newest
checkpoint, seeks the inputs back to its offsets and replays; SOutput drops the replayed
stable tuples that are already in the output topic.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from services.core.kafka import BatchProducer, last_message

# Kafka messages carry at most this much (topic max.message.bytes and producer limit).
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024
TOPIC_CONFIG = {"max.message.bytes": str(MAX_CHECKPOINT_BYTES), "retention.ms": str(3600_000)}


@dataclass
class Checkpoint:
    pipeline: bytes  # NodePipeline.snapshot()
    sunion: Any
    outputs: dict[str, tuple[int, int]]  # stream -> SOutput.state()
    ports: dict[str, tuple[int, int]]  # input stream -> (replica read, last stable id)
    offsets: dict[str, int] = field(default_factory=dict)  # input topic -> next offset
    taken_ms: int = 0


def save(producer: BatchProducer, topic: str, partition: int, ckpt: Checkpoint) -> int:
    """Write ``ckpt``; returns its size in bytes. The caller flushes."""
    data = pickle.dumps(ckpt, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise ValueError(f"checkpoint of {len(data)} bytes exceeds {MAX_CHECKPOINT_BYTES}: shrink windows or partition more")
    producer.send(topic, data, None, partition)
    return len(data)


def load(bootstrap: str, topic: str, partition: int) -> Checkpoint | None:
    """The newest checkpoint of one node replica partition, or None."""
    m = last_message(bootstrap, topic, partition)
    if m is None or not m.value():
        return None
    return pickle.loads(m.value())
