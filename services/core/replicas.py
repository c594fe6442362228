"""Choosing which replica of a stream to read, and where to start reading it.

Each replica of a node writes its own topic, the replica's output buffer. A reader (a
downstream node or a client) that changes replica continues in the new topic right after
the last stable tuple it already has: stable ids are the same on every replica, so that
point exists in every topic that has caught up.
"""
from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from services.core.control import NodeState
from services.core.kafka import RDKAFKA_LOG, retry_transient
from services.core.tuples import TYPE_BYTES, TupleType

# Best first: a stable replica, else one producing tentative results, else one busy
# reconciling (it produces corrections, not new tuples).
_RANK = {NodeState.STABLE: 0, NodeState.UPSTREAM_FAILURE: 1, NodeState.STABILIZATION: 2, NodeState.FAILED: 3}
_STABLE, _UNDO = TYPE_BYTES[TupleType.STABLE], TYPE_BYTES[TupleType.UNDO]


def choose_replica(states: list[NodeState], current: int | None) -> int:
    """The replica to read: the current one unless another is in a strictly better state."""
    best = min(range(len(states)), key=lambda r: (_RANK[states[r]], r))
    if current is not None and _RANK[states[current]] <= _RANK[states[best]]:
        return current
    return best


@retry_transient
def offset_after_stable(bootstrap: str, topic: str, partition: int, last_stable: int, chunk: int = 2000) -> int:
    """Offset right after stable tuple ``last_stable`` (or after an UNDO naming an id <= it) in a topic.

    Scans backward from the end, so the cost is the distance from the tail. Tuples after
    the returned offset are all newer than ``last_stable``, except stable duplicates with a
    smaller id when the topic has not caught up, which readers drop by id. ``last_stable``
    -1 means from the beginning.
    """
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hastream.seek", "enable.auto.commit": False,
                  "logger": RDKAFKA_LOG, "enable.partition.eof": True})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if last_stable < 0 or high <= low:
            return low
        end = high
        while end > low:
            start = max(low, end - chunk)
            c.assign([TopicPartition(topic, partition, start)])
            found = None
            pos = start
            while pos < end:
                msgs = c.consume(min(500, end - pos), 5)
                if not msgs:
                    break
                for m in msgs:
                    if m.error() is not None:
                        continue
                    pos = m.offset() + 1
                    if m.offset() >= end:
                        break
                    h = dict(m.headers() or ())
                    t = h.get("ht.type")
                    if t in (_STABLE, _UNDO):
                        try:
                            tid = int(h.get("ht.id", b"-2"))
                        except ValueError:
                            continue
                        if tid <= last_stable:
                            found = m.offset() + 1  # keep the newest such point in the chunk
            if found is not None:
                return found
            end = start
        return low
    finally:
        c.close()


_TENTATIVE = TYPE_BYTES[TupleType.TENTATIVE]


@retry_transient
def last_stable_id(bootstrap: str, topic: str, partition: int, chunk: int = 2000) -> int | None:
    """Id of the last stable tuple in a node's output topic: -1 if it has none, None if the topic is empty.

    Every message but a TENTATIVE one names it: a STABLE tuple its own id, control
    tuples (BOUNDARY, UNDO, REC_DONE) the last stable id before them.
    """
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hastream.seek", "enable.auto.commit": False,
                  "logger": RDKAFKA_LOG})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if high <= low:
            return None
        end = high
        while end > low:
            start = max(low, end - chunk)
            c.assign([TopicPartition(topic, partition, start)])
            found, pos = None, start
            while pos < end:
                msgs = c.consume(min(500, end - pos), 5)
                if not msgs:
                    raise TimeoutError(f"could not read {topic}[{partition}] at offset {pos}")
                for m in msgs:
                    if m.error() is not None or m.offset() >= end:
                        continue
                    pos = m.offset() + 1
                    h = dict(m.headers() or ())
                    if h.get("ht.type") not in (None, _TENTATIVE):
                        try:
                            found = int(h.get("ht.id", b""))
                        except ValueError:
                            pass
            if found is not None:
                return found
            end = start
        return -1
    finally:
        c.close()
