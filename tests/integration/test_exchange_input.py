"""What a consumer partition does with bad input on its connections, on the real broker: the test
writes two connections itself (as producer partitions 0 and 1 of an exchanged stream would) and runs
consumer partition 0 alone. A result whose key routes to another partition is dead-lettered with why
and the rest goes on; a connection that sends nothing, not even a boundary, is waited for at most
the node's delay share, with a line naming it, and the other connection's results come tentatively."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from services.client.source import END_OF_TIME
from services.core.codec import codec_for
from services.core.config import Settings
from services.core.partitioner import key_bytes, partition_for
from services.core.tuples import BOUNDARY, STABLE, TupleType, make_headers
from services.log.tail import range_consumer, read_range
from services.node.loop import NodeService
from services.schemes import build_scheme
from services.spec.exchanges import connection_topic
from tests.integration.helpers import create_topics, read_stream, unique_spec

pytestmark = pytest.mark.integration

SPEC = """\
name: xin-{u}
dpc: {delay: 2000, alpha: 0.5, heartbeat_interval: 100, failure_timeout: 800}
streams:
  readings: {schema: located, key: sensor, partitions: 2}
  warm: {schema: located, key: sensor, partitions: 2}
  out: {schema: located, key: sensor, partitions: 3}
operators:
  keep: {type: filter, input: readings, output: warm, where: "value > -1000"}
  again: {type: filter, input: warm, output: out, where: "value > -1000"}
nodes:
  pre: {operators: [keep]}
  post: {operators: [again]}
"""
BASE = 1_700_000_000_000


def _sensors(partition: int, n: int) -> list[str]:
    """``n`` sensor names whose results route to ``partition`` of 3."""
    return [s for s in (f"s{i}" for i in range(200)) if partition_for(key_bytes(s), 3) == partition][:n]


def _write(bootstrap: str, topic: str, records: list[dict], end: bool) -> None:
    """Partition 0 of ``topic`` as a producer partition writes a connection: dense stable ids, then its end."""
    p, encode = Producer({"bootstrap.servers": bootstrap}), codec_for("located").encode
    for i, r in enumerate(records):
        p.produce(topic, encode(r), r["sensor"].encode(), 0, headers=make_headers(STABLE, i, r["ts"]))
    if end:
        p.produce(topic, None, None, 0, headers=make_headers(BOUNDARY, -1, END_OF_TIME))
    p.flush()


def _records(sensors: list[str], n: int, offset_ms: int) -> list[dict]:
    return [
        {
            "sensor": sensors[i % len(sensors)],
            "building": "b0",
            "region": "g0",
            "ts": BASE + offset_ms + 10 * i,
            "value": 1.0 * i,
            "seq": i,
        }
        for i in range(n)
    ]


def _consumer_partition_0(spec, bootstrap: str, idle_s: float) -> NodeService:
    svc = NodeService(spec, "post", 0, 0, Settings(bootstrap=bootstrap, batch_size=200), build_scheme)
    threading.Thread(target=svc.run, kwargs={"max_idle_s": idle_s}, daemon=True).start()
    return svc


def test_a_result_routed_to_the_wrong_partition_is_dead_lettered_and_the_rest_goes_on(kafka, tmp_path: Path) -> None:
    spec, _ = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    mine, other = _sensors(0, 3), _sensors(1, 1)
    first = _records(mine, 20, 0)
    first[7] = {**first[7], "sensor": other[0]}  # routed to partition 0, but its key picks partition 1
    second = _records(mine, 10, 5)
    _write(kafka.bootstrap, connection_topic(spec, "warm", 0, 0), first, end=True)
    _write(kafka.bootstrap, connection_topic(spec, "warm", 1, 0), second, end=True)
    svc = _consumer_partition_0(spec, kafka.bootstrap, 3.0)
    got = read_stream(spec, "out", kafka.bootstrap, expect=29)
    want = sorted((r for r in first + second if r["sensor"] in mine), key=lambda r: r["ts"])
    assert [t.value for t in got if t.partition == 0] == want  # in tuple-time order, both connections merged
    assert all(t.meta.type is TupleType.STABLE for t in got)
    deadline = time.monotonic() + 20
    while svc.stats.rejected < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert svc.stats.rejected == 1 and svc.stats.deadlettered_by == {"operator_error": 1}
    c = range_consumer(kafka.bootstrap, "t")
    try:
        dead = list(read_range(c, spec.deadletter_topic, 0, 0, 1))
    finally:
        c.close()
    why = dict(dead[0].headers() or [])["ht.error"]
    assert isinstance(why, bytes)
    why = why.decode()
    assert why == "routed to partition 0, but CRC32 of its 'sensor' picks partition 1 of 3", why


def test_a_silent_connection_is_waited_for_at_most_the_delay_share_and_named(kafka, tmp_path: Path, caplog) -> None:
    spec, _ = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    mine = _sensors(0, 3)
    caplog.set_level(logging.WARNING, logger="services.dpc.scheme")
    svc = _consumer_partition_0(spec, kafka.bootstrap, 6.0)
    time.sleep(2.0)  # the consumer is up; producer partition 1 never writes its connection
    began = time.monotonic()
    _write(kafka.bootstrap, connection_topic(spec, "warm", 0, 0), _records(mine, 30, 0), end=True)
    got = read_stream(spec, "out", kafka.bootstrap, expect=30, timeout=30)
    took = time.monotonic() - began
    assert len(got) == 30 and all(t.meta.type is TupleType.TENTATIVE for t in got)
    assert took <= spec.dpc.delay / 1000 + 1.5, f"the results waited {took:.1f} s for the silent connection"
    said = [r.getMessage() for r in caplog.records if "going tentative" in r.getMessage()]
    assert said and "warm/1 (no boundary yet)" in said[0], said
    svc.stop()
