"""Large restart images on the real broker: chunked past the topic's message limit and read
back whole, and written without stalling the node's heartbeats."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import deque
from pathlib import Path

import pytest

from services.control.messages import Heartbeat, now_ms
from services.core.admin import TopicSpec, ensure_topics
from services.core.config import Settings
from services.core.kafka import plain_consumer
from services.dpc.sunion import SUnionState
from services.log import images, retention
from services.node import restart
from services.node.loop import NodeService
from services.schemes import build_scheme
from services.spec.topics import restart_topics
from tests.integration.helpers import create_topics, unique_spec

pytestmark = pytest.mark.integration


def _image(size: int, seed: int) -> restart.RestartImage:
    noise = random.Random(seed).randbytes(size)  # lz4 cannot shrink it below the topic's limit
    return restart.RestartImage(noise, SUnionState([None], {}, None, {}, [None]), {"out": (seed, -1)}, {}, {"in": 7})


def test_an_image_many_times_the_topics_message_limit_is_saved_and_loaded(kafka, tmp_path: Path) -> None:
    topic = f"restart-{tmp_path.name}"
    limit = 100_000
    ensure_topics(kafka.bootstrap, [TopicSpec(topic, 1, 1, {**retention.IMAGES, "max.message.bytes": str(limit)})])
    writer = images.ImageWriter(kafka.bootstrap, topic, 0, chunk_bytes=64 * 1024)
    try:
        for seed in (1, 2):  # the second goes to the other slot, and is the one read
            writer.write(_image(3_000_000, seed))
            writer.wait()
    finally:
        writer.close()
    assert writer.failed == 0
    h = images.head(kafka.bootstrap, topic, 0)
    assert h.manifest is not None and h.manifest.size > 30 * limit and h.manifest.chunks > 30
    assert restart.load(kafka.bootstrap, topic, 0) == _image(3_000_000, 2)


JOIN = """\
name: big-{u}
dpc: {restart_image_interval: 500}
streams:
  l_{u}: {schema: reading, key: sensor}
  r_{u}: {schema: reading, key: sensor}
  pairs_{u}: {schema: joined, key: key}
operators:
  near: {type: join, left: l_{u}, right: r_{u}, output: pairs_{u}, key: sensor, within: 30,
         fields: {key: left.sensor, ts: "max(left.ts, right.ts)", left_value: left.value, right_value: right.value}}
nodes:
  n: {operators: [near]}
"""


def _join_state(records: int, keys: int = 1000) -> object:
    """A join holding ``records`` left tuples, as it would after that much input."""
    sides: tuple[dict, dict] = ({}, {})
    order: tuple[deque, deque] = (deque(), deque())
    for i in range(records):
        k = f"s{i % keys}"
        sides[0].setdefault(k, deque()).append((i, i, {"sensor": k, "ts": i, "value": float(i % 97), "seq": i}))
        order[0].append((i, k))
    return (sides, order, [records, None])


def test_writing_a_large_image_does_not_stall_the_nodes_heartbeats(kafka, tmp_path: Path) -> None:
    """A node whose state pickles to ~50 MB writes an image every 0.5 s: its heartbeats must
    never pause for the failure timeout, or its partner and readers would count it failed."""
    spec, _ = unique_spec(JOIN, tmp_path)
    # Segments that hold any image whole: this test is about heartbeats, not size limits.
    roomy = {**retention.IMAGES, "segment.bytes": str(256 * 1024 * 1024)}
    ensure_topics(kafka.bootstrap, [TopicSpec(t, n, 1, roomy) for t, n in restart_topics(spec)])
    create_topics(spec, kafka.bootstrap)
    svc = NodeService(spec, "n", 0, 0, Settings(bootstrap=kafka.bootstrap), build_scheme)
    svc.pipeline.operators[0].set_state(_join_state(800_000))
    t = threading.Thread(target=svc.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 120
    while svc.stats.restart_images < 3 and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    stopped_ms = now_ms()
    svc.stop()
    t.join(timeout=60)
    assert svc.stats.restart_images >= 3, "the node wrote no large images"

    sent = [ms for ms in _heartbeats(kafka.bootstrap, spec.heartbeat_topic, "n") if ms < stopped_ms]
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert len(sent) > 10
    timeout = spec.dpc.failure_timeout
    assert max(gaps) < timeout, f"heartbeats paused {max(gaps)} ms (failure timeout {timeout} ms)"
    h = images.head(kafka.bootstrap, svc.plan.restart_topics[0], 0)
    assert h.manifest is not None and h.manifest.size > 40_000_000, "the images were that large"


def _heartbeats(bootstrap: str, topic: str, node: str) -> list[int]:
    """When each of ``node``'s heartbeats was sent, in ms."""
    from confluent_kafka import TopicPartition

    c = plain_consumer(bootstrap, "test", unique=True)
    try:
        end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        c.assign([TopicPartition(topic, 0, 0)])
        sent: list[int] = []
        pos, deadline = 0, time.monotonic() + 30
        while pos < end and time.monotonic() < deadline:
            for m in c.consume(500, 1):
                if m.error() is None:
                    pos = (m.offset() or 0) + 1
                    hb = Heartbeat.decode(m.value() or b"")
                    if hb.node == node:
                        sent.append(hb.sent_ms)
        return sent
    finally:
        c.close()
