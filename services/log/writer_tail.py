"""Where a source writer finds one partition of its stream: what the last hastream writer left there.

A source writer (``services.client.source``) goes on with the dense id sequence and the epoch of
the newest hastream writer's message, passing over other clients' messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Message

from services.core.errors import HeaderError
from services.core.retry import retry_transient
from services.core.tuples import BOUNDARY, EPOCH, STABLE, parse_headers
from services.log.tail import backward


@dataclass(frozen=True)
class WriterTail:
    """Where a source writer finds one partition of its stream: what the last hastream writer left."""

    next_id: int  # the id that continues the dense sequence (0 in an empty partition)
    epoch: int  # that writer's epoch (0: no hastream writer wrote here)
    stime: int  # the stime of its newest message
    written_ms: int  # when that message was written (its Kafka timestamp), 0 if none
    boundary: bool  # that message is a BOUNDARY


NO_WRITER = WriterTail(0, 0, 0, 0, False)  # a partition no hastream writer wrote


def _writer_view(m: Message) -> WriterTail | None:
    """What a message says of its writer, if a hastream writer wrote it (an epoch >= 1 and a type)."""
    try:
        meta = parse_headers(m.headers())
    except HeaderError:
        return None
    if meta.epoch < 1 or meta.type not in (STABLE, BOUNDARY, EPOCH):
        return None
    next_id = meta.id + 1  # a boundary names the last id sent, an EPOCH the one before the next
    return WriterTail(next_id, meta.epoch, meta.stime, m.timestamp()[1], meta.type is BOUNDARY)


@retry_transient
def writer_tail(bootstrap: str, topic: str, partition: int, chunk: int = 2000) -> WriterTail:
    """The newest message a hastream source writer (``services.client.source``) wrote in one partition.

    Messages of other clients (no epoch, or none of its tuple types) are passed over, so
    another client's tuple id never decides where the writer's sequence goes on.
    """
    for rows in backward(bootstrap, topic, partition, chunk, _writer_view):
        for _, tail in reversed(rows):
            if tail is not None:
                return tail
    return NO_WRITER
