"""CEC's output log on a real broker: each batch a transaction, a crash in the middle of one, the
eventual checkpoint read back from Kafka, and the replay after it.

A count window over skewed keys (fast and slow windows) writes its results and footprints through
``OutLog``. The writer dies with a batch sent but not committed; its successor takes the
transactional id over (which aborts that batch), reads the eventual checkpoint from the log's
committed records, loads it and replays the input after T. The scan must find what the same scan
finds in memory over the committed prefix, and the log's stable tuples must end equal to the
failure-free run's results, tuple for tuple, with dense ids.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from services.cec.checkpointer import Checkpointer, Out
from services.cec.footprints import Kind
from services.cec.intensity import Intensity
from services.cec.outlog import TOPIC_CONFIG, OutLog, eventual, record
from services.cec.scan import ScanError, backward
from services.core.admin import TopicSpec, ensure_topics
from services.core.codec import codec_for
from services.core.transactions import TransactionalProducer
from services.log import tail
from services.log.tail import last_stable_id, stable_log
from services.log.trim import trim_before
from services.operators.count_window import CountWindow
from services.spec import Aggregate

pytestmark = pytest.mark.integration

AGGS = (Aggregate("count", "count", None), Aggregate("sum", "sum", "value"), Aggregate("avg", "avg", "value"),
        Aggregate("min", "min", "value"), Aggregate("max", "max", "value"))  # fmt: skip
POLICY = Intensity(q=1000, u=600, ci_ms=5, cp_ms=10)


def workload(n: int, keys: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    return [
        {"sensor": f"k{min(int(rnd.expovariate(0.05)), keys - 1)}", "ts": i, "value": float(rnd.randint(0, 99))}
        for i in range(n)
    ]


def batches(recs: list[dict], size: int, start: int = 0) -> list[tuple[int, list[dict]]]:
    return [(p, recs[p : p + size]) for p in range(start, len(recs), size)]


def window() -> CountWindow:
    return CountWindow("w", "sensor", "ts", 10, AGGS)


def outs(cp: Checkpointer, pos: int, batch: list[dict]) -> list[Out]:
    return cp.push(pos, [(r, r["ts"]) for r in batch]) + cp.background(now_ms=pos)


def write(
    producer: TransactionalProducer, log: OutLog, cp: Checkpointer, recs: list[dict], size: int, start: int = 0
) -> None:
    """``recs`` from ``start`` through ``cp`` into ``log``, a committed transaction per batch of ``size``."""
    for pos, batch in batches(recs, size, start):
        producer.begin()
        log.write(outs(cp, pos, batch))
        producer.commit()


def results(log: list[Out]) -> list[dict]:
    return [payload[0] for mark, payload in log if mark.kind is Kind.RESULT]


def test_a_writer_that_dies_mid_transaction_is_recovered_from_the_committed_log(kafka: Any) -> None:
    bootstrap, topic, tid = kafka.bootstrap, f"cec.log.{uuid.uuid4().hex[:8]}", f"cec-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [TopicSpec(topic, 1, 1, TOPIC_CONFIG)])
    recs, size, crash_at = workload(3000, 150, 7), 50, 37

    ref, full, ends = Checkpointer(window(), POLICY), [], []
    for pos, batch in batches(recs, size):
        full.extend(outs(ref, pos, batch))
        ends.append(len(full))
    assert ref.checks > 0 and len(ref.fp) > 0  # the policy checked slow windows, some still open

    first = TransactionalProducer(bootstrap, tid)
    first.init()
    cp, log = Checkpointer(window(), POLICY), OutLog(first, topic, 0, "window_stat", "w")
    for i, (pos, batch) in enumerate(batches(recs, size)):
        first.begin()
        log.write(outs(cp, pos, batch))
        if i == crash_at:
            first.poll(1.0)  # sent to the broker (5 ms linger), never committed: the writer is gone
            break
        first.commit()

    assert _high(bootstrap, topic, "read_uncommitted") > _high(bootstrap, topic, "read_committed")  # it is there
    second = TransactionalProducer(bootstrap, tid)
    second.init()  # fences the dead writer and aborts its open transaction
    try:
        ec = eventual(bootstrap, topic, 0, chunk=64)
        committed = full[: ends[crash_at - 1]]
        want = backward([committed])
        assert {w: m for w, (m, _) in ec.parts.items()} == {w: m for w, (m, _) in want.parts.items()}
        assert (ec.start, ec.tail_pos, ec.next_seq) == (want.start, want.tail_pos, want.next_seq)
        assert ec.parts and ec.start < ec.tail_pos  # a real replay: slow windows reach back

        again = Checkpointer(window(), POLICY)
        start = again.load(ec)
        last = last_stable_id(bootstrap, topic, 0)
        assert last == len(results(committed)) - 1
        write(second, OutLog(second, topic, 0, "window_stat", "w", next_id=last + 1), again, recs, size, start + 1)
    finally:
        second.close()

    stored = stable_log(bootstrap, topic, 0)
    assert [i for i, _, _ in stored] == list(range(len(stored)))  # dense ids, nothing twice
    decode = codec_for("window_stat").decode
    assert [decode(v) for _, _, (v, _) in stored] == results(full)


def test_a_log_trimmed_past_the_extent_is_refused_in_one_line(kafka: Any) -> None:
    bootstrap, topic, tid = kafka.bootstrap, f"cec.trim.{uuid.uuid4().hex[:8]}", f"cec-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [TopicSpec(topic, 1, 1, TOPIC_CONFIG)])
    producer = TransactionalProducer(bootstrap, tid)
    producer.init()
    try:
        write(
            producer,
            OutLog(producer, topic, 0, "window_stat", "w"),
            Checkpointer(window(), POLICY),
            workload(1000, 80, 3),
            50,
        )
    finally:
        producer.close()
    ec = eventual(bootstrap, topic, 0)
    extent = min(m.seq for m, _ in ec.parts.values())
    offsets = [o for o, _, _ in _marks(bootstrap, topic)]
    trim_before(bootstrap, topic, 0, offsets[extent])  # what recovery needs is kept
    assert eventual(bootstrap, topic, 0).parts.keys() == ec.parts.keys()
    trim_before(bootstrap, topic, 0, offsets[extent] + 1)  # one record more
    with pytest.raises(ScanError, match="trimmed past the extent"):
        eventual(bootstrap, topic, 0)


def _marks(bootstrap: str, topic: str) -> list[tuple[int, Any, Any]]:
    """(offset, mark, payload) of every CEC record, in log order (their seqs are their places here)."""
    got = [(o, *r) for ch in tail.backward(bootstrap, topic, 0, 10**6, record) for o, r in ch if r is not None]
    assert [m.seq for _, m, _ in got] == list(range(len(got)))
    return got


def _high(bootstrap: str, topic: str, isolation: str) -> int:
    """The end of ``topic[0]`` as a reader of ``isolation`` sees it (read_committed: the last stable offset)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cec-test", "isolation.level": isolation})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        c.close()
