"""The output-log helpers every scheme uses, on a real broker: tail readers, seek after an id, trim."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from services.core.admin import TopicSpec, ensure_topics
from services.core.errors import TrimmedError
from services.core.kafka import BatchConsumer, BatchProducer
from services.core.tuples import TupleType, make_headers
from services.ha.acks import Ack, newest_usable
from services.ha.upstream_backup import read_acks
from services.log.tail import last_stable_id, offset_after_stable, output_tail
from services.log.trim import check_retained, trim_before, trim_limit
from services.log.writer_tail import NO_WRITER, writer_tail

pytestmark = pytest.mark.integration
S, T, U, B = TupleType.STABLE, TupleType.TENTATIVE, TupleType.UNDO, TupleType.BOUNDARY


def write(bootstrap: str, topic: str, msgs: list[tuple[TupleType, int]]) -> None:
    p = BatchProducer(bootstrap)
    for t, tid in msgs:
        p.send(topic, b"v" if t in (S, T) else None, None, 0, make_headers(t, tid, 0))
    p.flush()


def test_tail_readers(kafka: Any, topic_name: Callable[..., str]) -> None:
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    assert last_stable_id(kafka.bootstrap, topic, 0) is None and writer_tail(kafka.bootstrap, topic, 0) == NO_WRITER
    #          offsets: 0      1      2      3      4      5      6
    write(kafka.bootstrap, topic, [(S, 0), (S, 1), (T, 2), (T, 3), (U, 1), (S, 2), (T, 3)])
    assert last_stable_id(kafka.bootstrap, topic, 0) == 2  # tentative tuples name no stable id
    assert writer_tail(kafka.bootstrap, topic, 0) == NO_WRITER  # no source writer's epoch: passed over
    assert offset_after_stable(kafka.bootstrap, topic, 0, 0) == 1
    assert offset_after_stable(kafka.bootstrap, topic, 0, 1) == 5  # after the UNDO naming stable id 1
    assert offset_after_stable(kafka.bootstrap, topic, 0, 2) == 6
    assert offset_after_stable(kafka.bootstrap, topic, 0, -1) == 0


def test_trim_moves_the_log_start_forward_only(kafka: Any, topic_name: Callable[..., str]) -> None:
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    write(kafka.bootstrap, topic, [(S, i) for i in range(10)])
    assert trim_before(kafka.bootstrap, topic, 0, 4) == 4
    assert trim_before(kafka.bootstrap, topic, 0, 2) == 4  # never backwards
    assert offset_after_stable(kafka.bootstrap, topic, 0, -1) == 4  # readers start at the new log start
    assert last_stable_id(kafka.bootstrap, topic, 0) == 9  # the tail is untouched


def test_a_trim_keeps_the_writers_tail_and_its_restart_point(kafka: Any, topic_name: Callable[..., str]) -> None:
    """ha-review D1: readers that acked the whole log must not empty it, nor pass what its writer
    reads back at a takeover (stable ids from its restart point on)."""
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    assert trim_limit(kafka.bootstrap, topic, 0, None) == 0  # empty: nothing to keep, nothing to trim
    p = BatchProducer(kafka.bootstrap)
    #          offsets: 0       1       2       3          4       5       6          7
    for t, tid, stime in [(S, 0, 1), (S, 1, 2), (S, 2, 3), (B, 2, 100), (S, 3, 4), (S, 4, 5), (B, 4, 200), (T, 5, 6)]:
        p.send(topic, b"v" if t in (S, T) else None, None, 0, make_headers(t, tid, stime, epoch=1))
    p.flush()
    assert trim_limit(kafka.bootstrap, topic, 0, None) == 6  # the last boundary: the tail a writer reads
    assert trim_limit(kafka.bootstrap, topic, 0, 3) == 3  # a takeover checks ids 3 on
    assert trim_limit(kafka.bootstrap, topic, 0, 5) == 6
    trim_before(kafka.bootstrap, topic, 0, trim_limit(kafka.bootstrap, topic, 0, None))
    assert output_tail(kafka.bootstrap, topic, 0) == (4, 200)  # an amnesia or upstream writer goes on from it
    tail = writer_tail(kafka.bootstrap, topic, 0)
    assert (tail.next_id, tail.epoch) == (5, 1)  # a source writer goes on with its ids and epoch, not 0 and 1
    assert trim_limit(kafka.bootstrap, topic, 0, 3) == 6  # ids 3 and 4 trimmed already: no further


def test_a_log_without_a_boundary_is_not_trimmed(kafka: Any, topic_name: Callable[..., str]) -> None:
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    write(kafka.bootstrap, topic, [(S, i) for i in range(5)])
    assert trim_limit(kafka.bootstrap, topic, 0, None) == 0


def test_a_recovery_position_before_the_log_start_fails_loudly(kafka: Any, topic_name: Callable[..., str]) -> None:
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    write(kafka.bootstrap, topic, [(S, i) for i in range(10)])
    trim_before(kafka.bootstrap, topic, 0, 6)
    check_retained(kafka.bootstrap, {(topic, 0): 6})  # the kept record itself is still there
    with pytest.raises(TrimmedError, match=f"{topic} partition 0 from offset 5, but the log starts at 6"):
        check_retained(kafka.bootstrap, {(topic, 0): 5})


def test_a_consumer_reading_from_a_trimmed_position_fails_instead_of_skipping(
    kafka: Any, topic_name: Callable[..., str]
) -> None:
    """A trim between the check and the read (or a position never checked) must stop an HA node's
    reads: with the default reset the consumer would move to the log start and skip records 2..5."""
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    write(kafka.bootstrap, topic, [(S, i) for i in range(10)])
    trim_before(kafka.bootstrap, topic, 0, 6)
    strict = BatchConsumer(kafka.bootstrap, topic + ".strict", trims_fail=True)
    lenient = BatchConsumer(kafka.bootstrap, topic + ".lenient")
    try:
        strict.assign_offsets([TopicPartition(topic, 0, 2)])
        with pytest.raises(TrimmedError, match="no longer in the log"):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                strict.poll_batch(100, 0.5)
        lenient.assign_offsets([TopicPartition(topic, 0, 2)])
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 4 and time.monotonic() < deadline:
            got += lenient.poll_batch(100, 0.5)
        assert [m.offset() for m in got] == [6, 7, 8, 9]  # what the default does: skips 2..5 without a word
    finally:
        strict.close()
        lenient.close()


def test_a_takeover_reads_the_newest_acks_not_the_whole_acks_topic(kafka: Any, topic_name: Callable[..., str]) -> None:
    """ha-review D11: the acks topic keeps an ack per primary of every epoch; a takeover reads it back
    from its end to one chunk past the newest ack whose output the log holds."""
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    p = BatchProducer(kafka.bootstrap)

    def ack(node: str, epoch: int, out: int) -> None:
        a = Ack(node, 0, epoch, 1000 * epoch, {}, {}, {"w": out}, epoch)
        p.send(topic, a.encode(), a.key, 0)

    ack("n", 1, 10)
    for i in range(500):
        ack("other", i + 1, i)
    ack("n", 2, 20)
    ack("n", 3, 30)  # its output never reached the log (a replaced primary's)
    p.flush()
    got = read_acks(kafka.bootstrap, topic, "n", 0, {"w": 25}, chunk=100)
    assert newest_usable(got, {"w": 25}) == next(a for a in got if a.epoch == 2)
    assert all(a.epoch != 1 for a in got), "read back 500 acks further than needed"
    got = read_acks(kafka.bootstrap, topic, "n", 0, {"w": 15}, chunk=100)  # only the oldest is usable
    assert newest_usable(got, {"w": 15}) is not None and newest_usable(got, {"w": 15}).epoch == 1  # type: ignore[union-attr]
