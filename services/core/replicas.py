"""Choosing which replica of a stream to read, and where to start reading it.

Each replica of a node writes its own topic, the replica's output buffer. A reader (a
downstream node or a client) that changes replica continues in the new topic right after
the last stable tuple it already has: stable ids are the same on every replica, so that
point exists in every topic that has caught up.
"""
from __future__ import annotations

from typing import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from services.core.control import NodeState
from services.core.kafka import RDKAFKA_LOG, retry_transient
from services.core.tuples import TYPE_BYTES, TupleType

# Best first: a stable replica, else one producing tentative results, else one busy
# reconciling (it produces corrections, not new tuples).
_RANK = {NodeState.STABLE: 0, NodeState.UPSTREAM_FAILURE: 1, NodeState.STABILIZATION: 2, NodeState.FAILED: 3}
_STABLE, _UNDO, _TENTATIVE = (TYPE_BYTES[t] for t in (TupleType.STABLE, TupleType.UNDO, TupleType.TENTATIVE))


def choose_replica(states: list[NodeState], current: int | None) -> int:
    """The replica to read: the current one unless another is in a strictly better state."""
    best = min(range(len(states)), key=lambda r: (_RANK[states[r]], r))
    if current is not None and _RANK[states[current]] <= _RANK[states[best]]:
        return current
    return best


def _backward_chunks(bootstrap: str, topic: str, partition: int, chunk: int) -> Iterator[list[tuple[int, dict]]]:
    """The partition's messages as (offset, headers) in chunks of ``chunk``, newest chunk first.

    Readers look for the newest message with some property; scanning back from the end costs
    the distance from the tail, not the length of the log.
    """
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hastream.seek", "enable.auto.commit": False,
                  "logger": RDKAFKA_LOG})
    try:
        low, end = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        while end > low:
            start = max(low, end - chunk)
            c.assign([TopicPartition(topic, partition, start)])
            got: list[tuple[int, dict]] = []
            pos = start
            while pos < end:
                msgs = c.consume(min(500, end - pos), 5)
                if not msgs:
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"could not read {topic}[{partition}] at {pos}"))
                for m in msgs:
                    if m.error() is None and m.offset() < end:
                        pos = m.offset() + 1
                        got.append((m.offset(), dict(m.headers() or ())))
            yield got
            end = start
    finally:
        c.close()


def _id(h: dict) -> int | None:
    try:
        return int(h.get("ht.id", b""))
    except ValueError:
        return None


@retry_transient
def offset_after_stable(bootstrap: str, topic: str, partition: int, last_stable: int, chunk: int = 2000) -> int:
    """Offset right after stable tuple ``last_stable`` (or after an UNDO naming an id <= it) in a topic.

    Tuples after the returned offset are all newer than ``last_stable``, except stable
    duplicates with a smaller id when the topic has not caught up, which readers drop by
    id. ``last_stable`` -1 means from the beginning.
    """
    if last_stable >= 0:
        for msgs in _backward_chunks(bootstrap, topic, partition, chunk):
            for off, h in reversed(msgs):
                tid = _id(h)
                if h.get("ht.type") in (_STABLE, _UNDO) and tid is not None and tid <= last_stable:
                    return off + 1
    return _low(bootstrap, topic, partition)


@retry_transient
def last_stable_id(bootstrap: str, topic: str, partition: int, chunk: int = 2000) -> int | None:
    """Id of the last stable tuple in a node's output topic: -1 if it has none, None if the topic is empty.

    Every message but a TENTATIVE one names it: a STABLE tuple its own id, control
    tuples (BOUNDARY, UNDO, REC_DONE) the last stable id before them.
    """
    empty = True
    for msgs in _backward_chunks(bootstrap, topic, partition, chunk):
        empty = empty and not msgs
        for _, h in reversed(msgs):
            tid = _id(h)
            if h.get("ht.type") not in (None, _TENTATIVE) and tid is not None:
                return tid
    return None if empty else -1


def _low(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hastream.seek", "logger": RDKAFKA_LOG})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
    finally:
        c.close()
