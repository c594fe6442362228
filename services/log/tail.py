"""Reading an output log from its tail: the newest message, the last stable id, the offset after an id.

Each replica of a node writes its own topic, the replica's output buffer. A reader (a
downstream node or a client) that changes replica continues in the new topic right after
the last stable tuple it already has: stable ids are the same on every replica, so that
point exists in every topic that has caught up. A writer that restarts continues its dense
id sequence from the tail. Every scheme reads its logs through these functions.
"""

from __future__ import annotations

from typing import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from services.core.errors import HeaderError
from services.core.kafka import plain_consumer, retry_transient
from services.core.tuples import STABLE, TENTATIVE, UNDO, TupleType, parse_headers, peek_type_and_id

Meta = tuple[TupleType | None, int | None]  # what a backward scan needs of a message: type and id


def _read_range(c: Consumer, topic: str, partition: int, start: int, end: int) -> Iterator[Message]:
    """Every message of one partition from offset ``start`` up to ``end`` (excluded), in order;
    raises a retriable timeout if the broker stops delivering them."""
    c.assign([TopicPartition(topic, partition, start)])
    pos = start
    while pos < end:
        msgs = c.consume(min(500, end - pos), 5)
        if not msgs:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"could not read {topic}[{partition}] at {pos}"))
        for m in msgs:
            off = m.offset()
            if m.error() is None and off is not None and off < end:
                pos = off + 1
                yield m


def _backward_chunks(bootstrap: str, topic: str, partition: int, chunk: int) -> Iterator[list[tuple[int, Meta]]]:
    """The partition's messages as (offset, (type, id)) in chunks of ``chunk``, newest chunk first.

    Readers look for the newest message with some property; scanning back from the end costs
    the distance from the tail, not the length of the log.
    """
    c = plain_consumer(bootstrap, "seek")
    try:
        low, end = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        while end > low:
            start = max(low, end - chunk)
            yield [
                (m.offset() or 0, peek_type_and_id(m.headers())) for m in _read_range(c, topic, partition, start, end)
            ]
            end = start
    finally:
        c.close()


@retry_transient
def offset_after_stable(bootstrap: str, topic: str, partition: int, last_stable: int, chunk: int = 2000) -> int:
    """Offset right after stable tuple ``last_stable`` (or after an UNDO naming an id <= it) in a topic.

    Tuples after the returned offset are all newer than ``last_stable``, except stable
    duplicates with a smaller id when the topic has not caught up, which readers drop by
    id. ``last_stable`` -1 means from the beginning.
    """
    if last_stable >= 0:
        for msgs in _backward_chunks(bootstrap, topic, partition, chunk):
            for off, (t, tid) in reversed(msgs):
                if t in (STABLE, UNDO) and tid is not None and tid <= last_stable:
                    return off + 1
    return first_offset(bootstrap, topic, partition)


@retry_transient
def last_stable_id(bootstrap: str, topic: str, partition: int, chunk: int = 2000) -> int | None:
    """Id of the last stable tuple in a node's output topic: -1 if it has none, None if the topic is empty.

    Every message but a TENTATIVE one names it: a STABLE tuple its own id, control
    tuples (BOUNDARY, UNDO, REC_DONE) the last stable id before them.
    """
    empty = True
    for msgs in _backward_chunks(bootstrap, topic, partition, chunk):
        empty = empty and not msgs
        for _, (t, tid) in reversed(msgs):
            if t not in (None, TENTATIVE) and tid is not None:
                return tid
    return None if empty else -1


@retry_transient
def first_offset(bootstrap: str, topic: str, partition: int) -> int:
    """The oldest offset still in the log (retention or DeleteRecords removed what was before)."""
    c = plain_consumer(bootstrap, "seek")
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
    finally:
        c.close()


@retry_transient
def stable_after(
    bootstrap: str, topic: str, partition: int, last: int
) -> dict[int, tuple[int, tuple[bytes | None, bytes | None]]]:
    """Every stable tuple with an id above ``last`` in a node's output topic: id -> (stime, (value, key)).

    A restarted writer regenerates them and checks each against what the log holds.
    """
    c = plain_consumer(bootstrap, "seek")
    try:
        end = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        out: dict[int, tuple[int, tuple[bytes | None, bytes | None]]] = {}
        for m in _read_range(c, topic, partition, offset_after_stable(bootstrap, topic, partition, last), end):
            try:
                meta = parse_headers(m.headers())
            except HeaderError:
                continue
            if meta.type is STABLE and meta.id > last:
                out[meta.id] = (meta.stime, (m.value(), m.key()))
        return out
    finally:
        c.close()


@retry_transient
def last_message(bootstrap: str, topic: str, partition: int, timeout: float = 10) -> Message | None:
    """The newest message of one partition, or None if it is empty.

    Services read it at start to continue their dense ``ht.id`` sequence. A partition that
    has messages but does not deliver the newest in time raises (a retriable timeout),
    rather than look empty and restart the sequence at 0.
    """
    c = plain_consumer(bootstrap, "peek")
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        if high <= low:
            return None
        c.assign([TopicPartition(topic, partition, high - 1)])
        deadline = timeout
        while deadline > 0:
            m = c.poll(0.5)
            deadline -= 0.5
            if m is not None and m.error() is None:
                return m
        raise KafkaException(
            KafkaError(KafkaError._TIMED_OUT, f"newest message of {topic}[{partition}] not read in {timeout}s")
        )
    finally:
        c.close()


@retry_transient
def messages_between(bootstrap: str, topic: str, partition: int, start: int, end: int) -> list[Message]:
    """Every message of one partition from offset ``start`` up to ``end`` (excluded), in order."""
    c = plain_consumer(bootstrap, "peek")
    try:
        return list(_read_range(c, topic, partition, start, end))
    finally:
        c.close()


def next_tuple_id(bootstrap: str, topic: str, partition: int) -> int:
    """The ``ht.id`` that continues a writer's dense sequence in one partition (0 when empty)."""
    m = last_message(bootstrap, topic, partition)
    if m is None:
        return 0
    try:
        return parse_headers(m.headers()).id + 1
    except HeaderError:
        return (m.offset() or 0) + 1
