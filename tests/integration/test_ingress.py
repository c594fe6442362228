"""Plain Kafka producers feed a deployment through its ingress: no ``ht`` header, two at once.

Two confluent-kafka producers, as users have them (JSON values, the sensor as the key, the
default partitioner), write the raw topic of an ingress-fed stream of a running deployment
(`hastream up`, two replicas of the ingress and of the node behind it). `hastream source end`
ends the stream; then every replica's stable output must equal the reference evaluation of
what the producers wrote, tuple for tuple, with dense ids.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Message, Producer

from services.core.partitioner import key_bytes, partition_for
from services.operators.reference import evaluate
from tests.integration.helpers import hastream, read_until_end, unique_spec

pytestmark = pytest.mark.integration

SPEC = """\
name: ingress-{u}
defaults: {partitions: 2, replicas: 2}
dpc: {heartbeat_interval: 100, failure_timeout: 1000}
streams:
  src_{u}: {schema: reading, key: sensor, ingress: {time: ts, lateness: 3000}}
  stats_{u}: {schema: window_stat, key: key}
operators:
  win: {type: window, input: src_{u}, output: stats_{u}, key: sensor, size: 200,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win]}
"""


def produce_plain(bootstrap: str, topic: str, first: int, n: int, placed: list[tuple[int, dict]]) -> None:
    """What a user's own producer does: JSON values keyed by sensor, default partitioner, no headers."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def delivered(err: object, msg: Message) -> None:
        assert err is None, err
        placed.append((msg.partition() or 0, json.loads(msg.value() or b"")))

    for i in range(first, first + n):
        sensor = f"s{i % 7}"
        rec = {"sensor": sensor, "ts": int(time.time() * 1000), "value": float(i % 40), "seq": i}
        p.produce(topic, json.dumps(rec).encode(), sensor.encode(), on_delivery=delivered)
        p.poll(0)
        time.sleep(0.004)
    p.flush(30)


def test_two_plain_producers_feed_a_deployment_through_its_ingress(kafka, tmp_path: Path) -> None:
    spec, path = unique_spec(SPEC, tmp_path)
    src, out = spec.streams[spec.sources()[0]].name.removesuffix(".raw"), spec.sinks()[0]
    env = {**os.environ, "HASTREAM_HOME": str(tmp_path / "home")}
    env.pop("HASTREAM_BOOTSTRAP", None)
    r = hastream("up", str(path), "--bootstrap", kafka.bootstrap, env=env)
    assert r.returncode == 0, r.stderr
    try:
        placed: list[tuple[int, dict]] = []
        producers = [
            threading.Thread(
                target=produce_plain, args=(kafka.bootstrap, spec.topic(f"{src}.raw"), k * 1000, 250, placed)
            )
            for k in range(2)
        ]
        for t in producers:
            t.start()
        for t in producers:
            t.join(60)
        assert len(placed) == 500
        assert all(p == partition_for(key_bytes(rec["sensor"]), 2) for p, rec in placed), "librdkafka's partitioner"
        ended = hastream("source", "end", str(path), src, env=env)
        assert ended.returncode == 0, ended.stderr
        got = [read_until_end(kafka.bootstrap, spec.topic(out, r), 2, "window_stat") for r in range(2)]
    finally:
        hastream("down", spec.name, env=env)

    inputs: list[list[dict]] = [[], []]
    for p, rec in placed:
        inputs[p].append(rec)
    want = evaluate(spec, {f"{src}.raw": inputs}, ended=True)[out]
    assert sum(map(len, want)) > 0
    for replica, parts in enumerate(got):
        for p in range(2):
            assert sorted(parts[p]) == list(range(len(parts[p]))), f"r{replica} p{p}: ids not dense"
            mine = [parts[p][i] for i in sorted(parts[p])]
            assert mine == want[p], f"replica {replica} partition {p} differs from the reference"
