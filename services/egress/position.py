"""Where an egress goes on: the id of the newest record committed to its partition.

The committed tail is the egress's read position, written in the same transaction as the
records (``services.core.transactions``): a new primary, once its ``init()`` has fenced the old
one and aborted what it left open, reads the partition ``read_committed`` back from its end and
goes on after the newest id it finds. It needs no offsets of its own, and so the position holds
whichever replica of the stream's node it reads next (stable ids are the same on every replica).
"""

from __future__ import annotations

from confluent_kafka import TopicPartition

from services.core.retry import retry_transient
from services.egress.records import record_id
from services.log.tail import range_consumer, read_range

CHUNK = 1000  # offsets read per step back from the end: a transaction's records, then its marker


@retry_transient
def last_written_id(bootstrap: str, topic: str, partition: int) -> int | None:
    """The id of the newest committed record in ``topic[partition]`` (None: it has none). Aborted
    records and transaction markers are never delivered (``read_range`` passes them)."""
    c = range_consumer(bootstrap, "egress")
    try:
        low, end = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        while end > low:
            start = max(low, end - CHUNK)
            ids = [
                rid for m in read_range(c, topic, partition, start, end) if (rid := record_id(m.headers())) is not None
            ]
            if ids:
                return ids[-1]
            end = start
        return None
    finally:
        c.close()
