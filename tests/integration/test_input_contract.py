"""The contract of a typed input stream: one writer, dense ids, an end, and nothing dropped quietly.

Run as a user runs them: ``hastream produce`` as a process, other clients as plain
confluent-kafka producers, on the real broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition

from services.client.source import SourceWriter
from services.client.workload import readings
from services.core.codec import codec_for
from services.core.kafka import plain_consumer
from services.core.tuples import headers_dict, read_headers
from services.operators.reference import evaluate
from tests.integration.helpers import (
    create_topics,
    hastream,
    one_error_line,
    read_stream,
    run_nodes_until_idle,
    unique_spec,
)

pytestmark = pytest.mark.integration

SPEC = """\
name: contract-{u}
defaults: {partitions: 1}
streams:
  src_{u}: {schema: reading, key: sensor}
  stats_{u}: {schema: window_stat, key: key}
operators:
  win: {type: window, input: src_{u}, output: stats_{u}, key: sensor, size: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win]}
"""


def _env(tmp_path: Path, bootstrap: str) -> dict[str, str]:
    return {**os.environ, "HASTREAM_HOME": str(tmp_path / "home"), "HASTREAM_BOOTSTRAP": bootstrap}


def _wait_for_messages(bootstrap: str, topic: str, n: int, timeout: float = 30) -> None:
    c = plain_consumer(bootstrap, "t")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                if c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1] >= n:
                    return
            except KafkaException:
                pass  # the topic is new: its leader is not known yet
            time.sleep(0.2)
    finally:
        c.close()
    raise AssertionError(f"fewer than {n} messages in {topic}")


def test_a_second_producer_is_refused_while_one_writes(kafka, tmp_path: Path) -> None:
    spec, path = unique_spec(SPEC, tmp_path)
    src = spec.sources()[0]
    create_topics(spec, kafka.bootstrap)
    env = _env(tmp_path, kafka.bootstrap)
    first = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "produce", str(path), src, "--count", "0", "--rate", "100"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_messages(kafka.bootstrap, spec.topic(src), 20)
        second = hastream("produce", str(path), src, "--count", "10", env=env)
        one_error_line(second, "one writer")
    finally:
        first.send_signal(signal.SIGINT)
        out, errs = first.communicate(timeout=30)
    assert first.returncode == 0, errs
    assert "ended the stream" in out

    again = hastream("produce", str(path), src, "--count", "10", env=env)
    one_error_line(again, "has ended")  # a producer after the stream ended would only make late tuples


def test_another_clients_id_never_drops_later_tuples(kafka, tmp_path: Path) -> None:
    """A stray tuple with id 1000000 first in the stream is dead-lettered with the reason; the
    producer's tuples after it all go through, and the results equal the reference. The stray
    is written in the older form, one header per field, which readers take like ``ht``."""
    spec, path = unique_spec(SPEC, tmp_path)
    src, out = spec.sources()[0], spec.sinks()[0]
    create_topics(spec, kafka.bootstrap)
    records = list(readings(300, sensors=4, seed=5, step_ms=10))
    stray = Producer({"bootstrap.servers": kafka.bootstrap})
    headers: list[tuple[str, str | bytes | None]] = [
        ("ht.type", b"STABLE"),
        ("ht.id", b"1000000"),
        ("ht.stime", b"%d" % records[0]["ts"]),
    ]
    stray.produce(spec.topic(src), codec_for("reading").encode(records[0]), b"s0", 0, headers=headers)
    stray.flush(10)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    r = hastream("produce", str(path), src, "--json", str(tmp_path / "in.jsonl"), env=_env(tmp_path, kafka.bootstrap))
    assert r.returncode == 0, r.stderr

    nodes = run_nodes_until_idle(spec, kafka.bootstrap)
    got = [t.value for t in read_stream(spec, out, kafka.bootstrap)]
    want = evaluate(spec, {src: [records]}, ended=True)[out][0]
    assert got == want
    stats = nodes["n.p0"].stats
    assert stats.deadlettered == 1 and stats.deadlettered_by == {"id_jump": 1}

    dl = plain_consumer(kafka.bootstrap, "dl")
    dl.assign([TopicPartition(spec.deadletter_topic, 0, 0)])
    msgs = [m for m in dl.consume(10, 10) if m.error() is None]
    dl.close()
    reasons = [headers_dict(m.headers())["ht.error"] for m in msgs]
    assert len(reasons) == 1 and "jumps past -1" in reasons[0]


def test_a_source_sends_a_boundary_only_when_its_time_has_moved(kafka, tmp_path: Path) -> None:
    """An idle source that promises nothing new sends nothing: a repeated boundary tells a node nothing."""
    spec, _ = unique_spec(SPEC, tmp_path)
    src = spec.sources()[0]
    create_topics(spec, kafka.bootstrap)
    w = SourceWriter(spec, src, kafka.bootstrap)
    for r in readings(10, sensors=2, step_ms=10, start_ms=0):
        w.send(r)
    sent = [w.boundary() for _ in range(5)]
    w.send(next(iter(readings(1, sensors=2, start_ms=500))))
    sent.append(w.boundary())
    w.flush()
    assert sent == [90, None, None, None, None, 500]
    c = plain_consumer(kafka.bootstrap, "b")
    c.assign([TopicPartition(spec.topic(src), 0, 0)])
    msgs = [m for m in c.consume(100, 10) if m.error() is None]
    c.close()
    assert [read_headers(m.headers())[2] for m in msgs if m.value() is None] == [90, 500]
