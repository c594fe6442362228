"""Trimming an output log: advance its start offset once nothing before it is needed for recovery.

Upstream backup (ICDE 2005, section 4) keeps a node's output in its log until every
downstream node has acknowledged that it no longer needs it; then the log may be cut
(Kafka's DeleteRecords moves the log start offset). Never trimming past what a reader
still needs is the caller's rule; this module only refuses to move the start backwards.
"""

from __future__ import annotations

from confluent_kafka import TopicPartition

from services.core.admin import admin_client
from services.core.errors import TrimmedError
from services.core.kafka import plain_consumer
from services.core.retry import retry_transient
from services.log.tail import first_offset, seek_after_stable, tail_offset


@retry_transient
def trim_before(bootstrap: str, topic: str, partition: int, offset: int, timeout: float = 30) -> int:
    """Delete the records of one partition below ``offset``; returns the new log start offset.

    A trim to an offset at or below the current start changes nothing.
    """
    admin = admin_client(bootstrap)
    tp = TopicPartition(topic, partition, offset)
    deleted = admin.delete_records([tp], operation_timeout=timeout, request_timeout=timeout)[tp].result()
    return int(deleted.low_watermark)


@retry_transient
def check_retained(bootstrap: str, positions: dict[tuple[str, int], int], timeout: float = 10) -> None:
    """Raise ``TrimmedError`` if a recovery that starts at ``positions`` ((topic, partition) ->
    offset) would find one of them already trimmed: a consumer reset to the log start would
    skip the records in between and quietly lose them."""
    c = plain_consumer(bootstrap, "retained")
    try:
        for (topic, partition), offset in sorted(positions.items()):
            start, _ = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            if offset < start:
                raise TrimmedError(
                    f"recovery needs {topic} partition {partition} from offset {offset}, but the log starts at "
                    f"{start}: it was trimmed past a position still needed, and records {offset}..{start - 1} are gone"
                )
    finally:
        c.close()


def trim_limit(bootstrap: str, topic: str, partition: int, keep: int | None) -> int:
    """How far one partition may be trimmed for its writer's sake: up to the newest message with a
    boundary (a writer that goes on from the tail reads back to it: an emptied log would restart its
    ids, or a source's epoch, at 0) and, ``keep`` not None, up to stable id ``keep`` (what a takeover
    regenerates from its restart point is checked against the log from there)."""
    limit = tail_offset(bootstrap, topic, partition)
    if limit < 0:
        return first_offset(bootstrap, topic, partition)  # no boundary yet: everything is the tail
    if keep is not None:
        limit = min(limit, seek_after_stable(bootstrap, topic, partition, keep - 1)[0])
    return limit
