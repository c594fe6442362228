"""The transactional write path on a real broker: a read_committed consumer sees a batch once it is
committed and never an aborted one; a second writer with the same transactional id fences the first
and aborts what it left open."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from services.core.admin import TopicSpec, ensure_topics
from services.core.errors import FencedError
from services.core.kafka import READ_COMMITTED, plain_consumer
from services.core.transactions import TransactionalProducer
from services.core.tuples import BOUNDARY, STABLE
from services.egress.position import last_written_id
from services.egress.records import PlainRecords
from services.log.tail import stable_log
from services.node.outputs import Outputs
from services.spec import parse_spec
from services.spec.plan import plan_node
from tests.integration.helpers import wait_for
from tests.unit.node.test_atomic_outputs import TEXT

pytestmark = pytest.mark.integration


def _committed(bootstrap: str, topic: str, wait_s: float = 3.0) -> list[bytes]:
    """Every value a read_committed consumer reads from partition 0 within ``wait_s`` of quiet."""
    c = plain_consumer(bootstrap, "txn-test", unique=True, **READ_COMMITTED)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    quiet_until = time.monotonic() + wait_s
    try:
        while time.monotonic() < quiet_until:
            for m in c.consume(100, 0.2):
                if m.error() is None:
                    got.append(m.value() or b"")
                    quiet_until = time.monotonic() + 1.0
    finally:
        c.close()
    return got


def _batch(p: TransactionalProducer, topic: str, values: list[bytes]) -> None:
    p.begin()
    for v in values:
        p.send(topic, v, None, 0)


def test_a_committed_batch_is_read_and_an_aborted_or_open_one_is_not(
    kafka: Any, topic_name: Callable[..., str]
) -> None:
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    p = TransactionalProducer(kafka.bootstrap, f"{topic}.egress.p0")
    p.init()
    _batch(p, topic, [b"a", b"b"])
    p.commit()
    _batch(p, topic, [b"x", b"y"])
    p.abort()
    _batch(p, topic, [b"c"])
    p.commit()
    _batch(p, topic, [b"open"])
    p.poll(0.5)  # sent to the broker, not committed
    assert _committed(kafka.bootstrap, topic) == [b"a", b"b", b"c"]
    p.commit()
    assert _committed(kafka.bootstrap, topic) == [b"a", b"b", b"c", b"open"]


def test_a_second_writer_with_the_same_id_fences_the_first_and_aborts_its_open_batch(
    kafka: Any, topic_name: Callable[..., str]
) -> None:
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    tid = f"{topic}.egress.p0"
    old = TransactionalProducer(kafka.bootstrap, tid)
    old.init()
    _batch(old, topic, [b"a"])
    old.commit()
    _batch(old, topic, [b"zombie-1", b"zombie-2"])
    old.poll(0.5)  # on the broker, in a transaction left open: the writer is stopped here

    new = TransactionalProducer(kafka.bootstrap, tid)
    new.init()  # aborts the open transaction at once, without waiting for its timeout
    _batch(new, topic, [b"b"])
    new.commit()

    with pytest.raises(FencedError, match=f"transactional id {tid} was taken over by a newer writer"):
        old.send(topic, b"zombie-3", None, 0)
        old.commit()
    assert _committed(kafka.bootstrap, topic) == [b"a", b"b"]


def test_a_new_egress_primary_finds_the_newest_committed_id_past_aborted_and_open_batches(
    kafka: Any, topic_name: Callable[..., str]
) -> None:
    """The committed tail is the egress's read position: ids 0..9 committed, 10..12 aborted, 13..14
    left open by a writer that stopped; once a new writer has taken the id over, the position is 9."""
    topic = topic_name()
    ensure_topics(kafka.bootstrap, [TopicSpec(topic)])
    assert last_written_id(kafka.bootstrap, topic, 0) is None
    records = PlainRecords("reading", "sensor", "json")

    def batch(p: TransactionalProducer, ids: range) -> None:
        p.begin()
        for i in ids:
            key, value, headers = records.record(i, 1000 + i, {"sensor": "s1", "ts": i, "value": 1.0, "seq": i})
            p.send(topic, value, key, 0, headers)

    tid = f"{topic}.egress.p0"
    old = TransactionalProducer(kafka.bootstrap, tid)
    old.init()
    for ids in (range(0, 4), range(4, 10)):
        batch(old, ids)
        old.commit()
    batch(old, range(10, 13))
    old.abort()
    assert last_written_id(kafka.bootstrap, topic, 0) == 9
    batch(old, range(13, 15))
    old.poll(0.5)
    TransactionalProducer(kafka.bootstrap, tid).init()
    assert last_written_id(kafka.bootstrap, topic, 0) == 9


def test_a_nodes_outputs_in_atomic_batches_are_read_by_hastreams_readers_only_once_committed(
    kafka: Any, topic_name: Callable[..., str]
) -> None:
    """The transactional write path of ``services.node.outputs``: a batch written (``write``) and not yet
    committed is unseen by hastream's own readers, which read committed records only; the next flush
    makes the whole batch readable at once, its boundary riding on its last result."""
    name = topic_name()
    spec = parse_spec(TEXT.replace("name: at", f"name: {name}"))
    (plan,) = plan_node(spec, "n").outputs
    ensure_topics(kafka.bootstrap, [TopicSpec(plan.topics[0])])
    out = Outputs((plan,), 0, 0)
    writer = TransactionalProducer(kafka.bootstrap, f"{name}.n.p0")
    writer.init()
    out.open(writer)
    rec = {"sensor": "s1", "ts": 5, "value": 1.5, "seq": 1}
    (payload, _), *_ = out.encode("b", [(rec, 5)], lambda *a: None)
    out.queue("b").extend([(STABLE, 0, 5, payload), (STABLE, 1, 6, payload), (BOUNDARY, -1, 7, None)])
    assert out.write() == 2
    writer.poll(0.5)
    assert stable_log(kafka.bootstrap, plan.topics[0], 0) == [], "an open batch was read"
    out.flush()
    # The commit returns once the transaction is decided; its markers, which move the end a read_committed
    # reader sees, are written just after: the batch is readable within moments, and then whole.
    read = wait_for(lambda: stable_log(kafka.bootstrap, plan.topics[0], 0), 10, "the committed batch")
    assert [(tid, stime) for tid, stime, _ in read] == [(0, 5), (1, 6)]
    writer.close()
