"""Reading an output log from its tail: the newest message, the last stable id, the offset after an id.

Each replica of a node writes its own topic, the replica's output buffer. A reader (a
downstream node or a client) that changes replica continues in the new topic right after
the last stable tuple it already has: stable ids are the same on every replica, so that
point exists in every topic that has caught up. A writer that restarts continues its dense
id sequence from the tail. Every scheme reads its logs through these functions.

Scans leave out what a fenced writer wrote (a lower epoch after a higher one, see
``services.core.tuples.EpochGate``), and say which epoch is in force where a reader starts.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from services.core.errors import HeaderError
from services.core.kafka import plain_consumer
from services.core.retry import retry_transient
from services.core.tuples import (
    BOUNDARY,
    EPOCH,
    FOOTPRINTS,
    STABLE,
    TENTATIVE,
    UNDO,
    EpochGate,
    TupleType,
    parse_headers,
    peek,
)

# The types whose id names no stable id: a tentative tuple's is its own, an EPOCH and a CEC footprint have none.
_UNNUMBERED = frozenset({TENTATIVE, EPOCH, *FOOTPRINTS})
# What a backward scan needs of a message: type, id, epoch, whether a boundary rides on it, and
# a tentative tuple's t_max (None for other types).
Meta = tuple[TupleType | None, int | None, int, bool, int | None]
V = TypeVar("V")


_RANGE_READ: dict[str, Any] = {"fetch.wait.max.ms": 10}
_MAX_CHUNK = 100_000  # messages per chunk of a backward scan, at most
READ_S = 5.0  # how long a range read may go without getting further before it counts as a transient error


@contextmanager
def _range_consumer(bootstrap: str, role: str) -> Iterator[Consumer]:
    """A consumer for reading a known range of offsets, closed after use. A fetch at the log's end
    returns at once instead of waiting the default 500 ms for more data: with that wait a switch's
    seek took about 1 s to read three chunks, and new results reached the client after X."""
    c = range_consumer(bootstrap, role)
    try:
        yield c
    finally:
        c.close()


def range_consumer(bootstrap: str, role: str) -> Consumer:
    """A consumer for reading a known range of offsets (the caller closes it)."""
    return plain_consumer(bootstrap, role, **_RANGE_READ)


def read_range(c: Consumer, topic: str, partition: int, start: int, end: int) -> Iterator[Message]:
    """Every message of one partition from offset ``start`` up to ``end`` (excluded), in order;
    raises a retriable timeout if the broker stops delivering them for ``READ_S``. A log written in
    transactions has offsets no reader is given (transaction markers, aborted records): the
    consumer's position passes them, and the read ends once it reaches ``end``."""
    c.assign([TopicPartition(topic, partition, start)])
    pos, moved = start, time.monotonic()
    while pos < end:
        msgs = c.consume(min(500, end - pos), 0.1)
        at = pos
        for m in msgs:
            off = m.offset()
            if m.error() is None and off is not None and off < end:
                pos = off + 1
                yield m
        if not msgs:
            passed = c.position([TopicPartition(topic, partition)])[0].offset
            pos = max(pos, passed if passed is not None else pos)
        if pos > at:
            moved = time.monotonic()
        elif time.monotonic() - moved > READ_S:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"could not read {topic}[{partition}] at {pos}"))


def _meta(m: Message) -> Meta:
    headers = m.headers()
    try:
        meta = parse_headers(headers)
    except HeaderError:  # a scan skips what it cannot use
        t, tid, epoch = peek(headers)
        return t, tid, epoch, False, None
    return meta.type, meta.id, meta.epoch, meta.bound is not None, meta.tmax if meta.type is TENTATIVE else None


def backward(
    bootstrap: str, topic: str, partition: int, chunk: int, view: Callable[[Message], V]
) -> Iterator[list[tuple[int, V]]]:
    """The partition's messages as (offset, ``view(message)``) in chunks, newest chunk first.

    Each chunk is four times the one before (from ``chunk``): what is sought is mostly near the
    tail, but a switch after a long failure scans its whole tentative run, and each chunk costs
    a round of fetches, which a loaded broker answers slowly."""
    with _range_consumer(bootstrap, "seek") as c:
        low, end = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        size = chunk
        while end > low:
            start = max(low, end - size)
            yield [(m.offset() or 0, view(m)) for m in read_range(c, topic, partition, start, end)]
            end, size = start, min(size * 4, _MAX_CHUNK)


def _live_backward(
    bootstrap: str, topic: str, partition: int, chunk: int, view: Callable[[Message], Meta] = _meta
) -> Iterator[tuple[int, Meta]]:
    """The partition's messages newest first, without those of fenced writers (a lower epoch after a
    higher one). Each message's epoch is then the one in force right after it.

    A chunk is judged with the highest epoch of the chunk before it: a replaced writer writes
    at most what it had in flight and one flush after its successor's EPOCH before it stops
    (``services.node.fence``), fewer messages than a chunk.
    """
    chunks = backward(bootstrap, topic, partition, chunk, view)
    cur = next(chunks, None)
    while cur is not None:
        older = next(chunks, None)
        top = max((m[2] for _, m in older), default=0) if older is not None else 0
        live = []
        for off, m in cur:
            if m[2] >= top:
                top = m[2]
                live.append((off, m))
        yield from reversed(live)
        cur = older


@retry_transient
def seek_after_stable(
    bootstrap: str, topic: str, partition: int, last_stable: int, chunk: int = 2000
) -> tuple[int, int]:
    """Offset right after stable tuple ``last_stable`` (or after an UNDO naming an id <= it) in a
    topic, and the writer epoch in force there (a reader starting there drops lower ones).

    Tuples after the returned offset are all newer than ``last_stable``, except stable
    duplicates with a smaller id when the topic has not caught up, which readers drop by
    id. ``last_stable`` -1 means from the beginning. When a boundary rides on stable tuple
    ``last_stable`` (a bound in its ``ht``), the offset is that tuple's own: the reader drops it as a
    duplicate but takes the boundary, which this replica may never repeat (an ended stream).
    """
    if last_stable >= 0:
        for off, (t, tid, epoch, carries, _) in _live_backward(bootstrap, topic, partition, chunk):
            if t in (STABLE, UNDO) and tid is not None and tid <= last_stable:
                return (off if carries and tid == last_stable and t is STABLE else off + 1), epoch
    return first_offset(bootstrap, topic, partition), 0


@retry_transient
def seek_after_tentative(
    bootstrap: str, topic: str, partition: int, last_stable: int, tmax: int, chunk: int = 2000
) -> tuple[int, int]:
    """Where a reader holding tentative tuples up to t_max ``tmax`` continues in another replica's topic
    (the paper's switch to a replica in UPSTREAM_FAILURE), and the writer epoch in force there.

    Right after the newest tentative tuple with a t_max at or below ``tmax``: the reader then
    gets only tentative tuples beyond those it has. Never past a stable tuple it lacks,
    though: if the topic holds stable ids above ``last_stable`` (older than that tentative
    tuple, since tentative ids follow the stable ones), where ``seek_after_stable`` goes. The
    newest STABLE or UNDO tuple decides, so the scan reads the topic's tentative suffix.
    """
    found: tuple[int, int] | None = None  # right after the newest tentative tuple the reader has
    lacking = False  # the topic holds stable tuples the reader lacks
    for off, (t, tid, epoch, carries, tm) in _live_backward(bootstrap, topic, partition, chunk):
        if tid is None:
            continue
        if t is STABLE or t is UNDO:
            if tid <= last_stable:
                if found is not None:
                    return found
                return (off if carries and tid == last_stable and t is STABLE else off + 1), epoch
            found, lacking = None, True  # from after the reader's last stable tuple
            if last_stable < 0:
                break  # that is the start
        elif t is TENTATIVE and not lacking and found is None and tm is not None and tm <= tmax:
            found = off + 1, epoch
    return found if found is not None else (first_offset(bootstrap, topic, partition), 0)


@retry_transient
def undo_after(
    bootstrap: str, topic: str, partition: int, start: int, last_stable: int, limit: int = 5000, wait_s: float = 0.0
) -> tuple[int, int] | None:
    """The offset of the first UNDO naming an id at or below ``last_stable`` that follows offset
    ``start`` in a replica's topic, and the writer epoch there; None if other than tentative tuples
    or more than ``limit`` messages come first, or none is written within ``wait_s``.

    ``start`` is a place in that replica's tentative run known from before it reconciled: a reader
    switching to it finds the start of its corrections by reading on from there rather than by
    scanning back across them all (``seek_after_stable``). Its stable tuples continue there
    without a gap, since the UNDO names an id the reader has.
    """
    deadline = time.monotonic() + wait_s
    with _range_consumer(bootstrap, "seek") as c:
        pos = start
        while True:
            end = min(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1], start + limit)
            for m in read_range(c, topic, partition, pos, end):
                t, tid, epoch = peek(m.headers())
                if t is UNDO and tid is not None and tid <= last_stable:
                    return m.offset() or 0, epoch
                if t not in _UNNUMBERED:
                    return None
            pos = max(pos, end)
            if pos >= start + limit or time.monotonic() >= deadline:
                return None
            time.sleep(0.02)  # the replica is about to write it (its heartbeat said it reconciles)


@retry_transient
def seek_fresh(bootstrap: str, topic: str, partition: int, tmax: int, chunk: int = 300) -> tuple[int, int]:
    """Where a reader starts reading another replica's new tentative tuples only (rule 4: the replica
    it follows reconciles, and its corrections bring the stable ones), and the writer epoch there.

    Right after the newest tentative tuple with a t_max at or below ``tmax`` (the reader has those),
    or, if that replica's current tentative run is all newer, right after what precedes the run.
    Unlike ``seek_after_tentative`` the scan stops there: stable tuples further back do not matter,
    so it costs the distance from the tail, not the length of a long failure's run.
    """
    for off, (t, tid, epoch, _, tm) in _live_backward(bootstrap, topic, partition, chunk):
        if tid is None or t is EPOCH:
            continue
        if t is not TENTATIVE or (tm is not None and tm <= tmax):
            return off + 1, epoch
    return first_offset(bootstrap, topic, partition), 0


def offset_after_stable(bootstrap: str, topic: str, partition: int, last_stable: int, chunk: int = 2000) -> int:
    """The offset of ``seek_after_stable``."""
    return seek_after_stable(bootstrap, topic, partition, last_stable, chunk)[0]


@retry_transient
def last_stable_id(bootstrap: str, topic: str, partition: int, chunk: int = 2000) -> int | None:
    """Id of the last stable tuple in a node's output topic: -1 if it has none, None if nothing but
    EPOCH tuples was ever written to it.

    Every message but a TENTATIVE, EPOCH or CEC footprint names it: a STABLE tuple its own id, control
    tuples (BOUNDARY, UNDO, REC_DONE) the last stable id before them.
    """
    empty = True
    for _, (t, tid, _, _, _) in _live_backward(bootstrap, topic, partition, chunk):
        if t is EPOCH:
            continue
        empty = False
        if t is not None and t not in _UNNUMBERED and tid is not None:
            return tid
    return None if empty else -1


def _bound_meta(m: Message) -> Meta:
    """``Meta`` with the boundary a message gives in place of a t_max: a BOUNDARY's stime, or a
    stable tuple's bound (None: it gives none)."""
    headers = m.headers()
    try:
        meta = parse_headers(headers)
    except HeaderError:  # skipped as in ``_meta``; a boundary that cannot be read is no tuple at all
        t, tid, epoch = peek(headers)
        return (None, None, epoch, False, None) if t is BOUNDARY else (t, tid, epoch, False, None)
    t = meta.type
    bound = meta.stime if t is BOUNDARY else meta.bound if t is STABLE else None
    return t, meta.id, meta.epoch, bound is not None, bound


def _tail(bootstrap: str, topic: str, partition: int, chunk: int) -> tuple[int, int, int]:
    """(the offset of the live writer's newest message with a boundary, -1 if none; the last stable
    id, -1 if none; that boundary, -1 if none)."""
    last: int | None = None
    for off, (t, tid, _, _, bound) in _live_backward(bootstrap, topic, partition, chunk, _bound_meta):
        if last is None and t is not None and t not in _UNNUMBERED and tid is not None:
            last = tid
        if bound is not None:  # a STABLE or BOUNDARY message: it named the last stable id above, if not a newer one
            return off, (last if last is not None else -1), bound
    return -1, (last if last is not None else -1), -1


@retry_transient
def output_tail(bootstrap: str, topic: str, partition: int, chunk: int = 2000) -> tuple[int, int]:
    """Where the live writer of a one-log output left it: (the last stable id, -1 if none; the last
    boundary, -1 if none). A writer that takes over goes on from there: the next id, and no
    tuple below that boundary (``services.ha.scheme``)."""
    _, last, bound = _tail(bootstrap, topic, partition, chunk)
    return last, bound


@retry_transient
def tail_offset(bootstrap: str, topic: str, partition: int, chunk: int = 200) -> int:
    """The oldest offset a writer that goes on from the log's tail reads (``output_tail``, which reads
    further back than ``last_stable_id`` and a source's ``writer_tail``); -1: no message has a boundary."""
    return _tail(bootstrap, topic, partition, chunk)[0]


@retry_transient
def first_offset(bootstrap: str, topic: str, partition: int) -> int:
    """The oldest offset still in the log (retention or DeleteRecords removed what was before)."""
    with _range_consumer(bootstrap, "seek") as c:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]


Stored = tuple[int, int, tuple[bytes | None, bytes | None]]  # (id, stime, (value, key)) of a stable tuple


@retry_transient
def stable_log(bootstrap: str, topic: str, partition: int) -> list[Stored]:
    """Every stable tuple a node's output log holds, in log order, duplicates included (a rollback
    recovery writes some twice), fenced writers' tuples left out as readers leave them out."""
    with _range_consumer(bootstrap, "peek") as c:
        start, end = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return list(stable_records(c, topic, partition, start, end, 0))


def stable_records(c: Consumer, topic: str, partition: int, start: int, end: int, epoch: int) -> Iterator[Stored]:
    """The stable tuples of ``topic[partition]`` from ``start`` up to ``end``, admitted by the epochs."""
    gate = EpochGate(epoch)
    for m in read_range(c, topic, partition, start, end):
        try:
            meta = parse_headers(m.headers())
        except HeaderError:
            continue
        if gate.admits(meta.epoch) and meta.type is STABLE:
            yield meta.id, meta.stime, (m.value(), m.key())


@retry_transient
def last_message(bootstrap: str, topic: str, partition: int, timeout: float = 10) -> Message | None:
    """The newest message of one partition, or None if it is empty.

    Services read it at start to continue their dense tuple id sequence. A partition that
    has messages but does not deliver the newest in time raises (a retriable timeout),
    rather than look empty and restart the sequence at 0.
    """
    with _range_consumer(bootstrap, "peek") as c:
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


@retry_transient
def messages_after(bootstrap: str, topic: str, partition: int, start: int, timeout: float = 10) -> list[Message]:
    """Every message of one partition from offset ``start`` to its end now, in order."""
    with _range_consumer(bootstrap, "peek") as c:
        _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        return list(read_range(c, topic, partition, start, high))


@retry_transient
def messages_between(bootstrap: str, topic: str, partition: int, start: int, end: int) -> list[Message]:
    """Every message of one partition from offset ``start`` up to ``end`` (excluded), in order."""
    with _range_consumer(bootstrap, "peek") as c:
        return list(read_range(c, topic, partition, start, end))
