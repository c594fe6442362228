"""Where an egress goes on: the id of the newest record committed to its partition.

The committed tail is the egress's read position, written in the same transaction as the
records (``services.core.transactions``): a new primary, once its ``init()`` has fenced the old
one and aborted what it left open, reads the partition ``read_committed`` back from its end and
goes on after the newest id it finds. It needs no offsets of its own, and so the position holds
whichever replica of the stream's node it reads next (stable ids are the same on every replica).
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from services.core.kafka import plain_consumer
from services.core.retry import retry_transient
from services.core.transactions import READ_COMMITTED
from services.egress.records import record_id

CHUNK = 1000  # offsets read per step back from the end: a transaction's records, then its marker
READ_S = 10.0  # how long reading one chunk may take before it counts as a transient error


@retry_transient
def last_written_id(bootstrap: str, topic: str, partition: int) -> int | None:
    """The id of the newest committed record in ``topic[partition]`` (None: it has none)."""
    c = plain_consumer(bootstrap, "egress", unique=True, **READ_COMMITTED, **{"fetch.wait.max.ms": 10})
    try:
        low, end = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        while end > low:
            start = max(low, end - CHUNK)
            ids = _ids(c, TopicPartition(topic, partition, start), end)
            if ids:
                return ids[-1]
            end = start
        return None
    finally:
        c.close()


def _ids(c: Consumer, tp: TopicPartition, end: int) -> list[int]:
    """The ids of the committed records from ``tp.offset`` up to ``end`` (aborted ones and transaction
    markers are never delivered: the position passes them)."""
    c.assign([tp])
    got: list[int] = []
    deadline = time.monotonic() + READ_S
    while True:
        for m in c.consume(500, 0.1):
            off = m.offset()
            if m.error() is None and off is not None and off < end:
                rid = record_id(m.headers())
                if rid is not None:
                    got.append(rid)
        pos = c.position([TopicPartition(tp.topic, tp.partition)])[0].offset
        if pos >= end:
            return got
        if time.monotonic() > deadline:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"could not read {tp.topic}[{tp.partition}] up to {end} (at {pos})")
            )
