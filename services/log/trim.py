"""Trimming an output log: advance its start offset once nothing before it is needed for recovery.

Upstream backup (ICDE 2005, section 4) keeps a node's output in its log until every
downstream node has acknowledged that it no longer needs it; then the log may be cut
(Kafka's DeleteRecords moves the log start offset). Never trimming past what a reader
still needs is the caller's rule; this module only refuses to move the start backwards.
"""

from __future__ import annotations

from confluent_kafka import TopicPartition

from services.core.admin import admin_client
from services.core.kafka import retry_transient


@retry_transient
def trim_before(bootstrap: str, topic: str, partition: int, offset: int, timeout: float = 30) -> int:
    """Delete the records of one partition below ``offset``; returns the new log start offset.

    A trim to an offset at or below the current start changes nothing.
    """
    admin = admin_client(bootstrap)
    tp = TopicPartition(topic, partition, offset)
    deleted = admin.delete_records([tp], operation_timeout=timeout, request_timeout=timeout)[tp].result()
    return int(deleted.low_watermark)
