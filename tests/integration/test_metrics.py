"""A node service's /metrics and its log, scraped from a real process on the real broker."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from services.client.source import SourceWriter
from services.client.workload import readings
from services.core.paths import REPO_ROOT
from services.core.tuples import TupleType, make_headers
from tests.integration.helpers import create_topics, unique_spec, wait_for

# /metrics may refuse connections while the service starts: that counts as not yet.
wait_scraped = partial(wait_for, interval=0.1, tolerate=(OSError,))

pytestmark = pytest.mark.integration

SPEC = """\
name: metrics-{u}
defaults: {partitions: 1}
streams:
  in_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: in_{u}, output: out_{u}, where: "value >= 0"}
nodes:
  n: {operators: [keep]}
"""
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) n\.r0\.p0 [\w.]+ \S")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> Samples:
    """Every sample of a /metrics page by (name, labels), labels without the replica's own."""
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    own = {"spec", "node", "partition", "replica"}
    return {
        (s.name, frozenset((k, v) for k, v in s.labels.items() if k not in own)): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _garbage(bootstrap: str, topic: str, next_id: int, epoch: int) -> None:
    """Two bad messages: one with a payload that is not Avro, one without the ht header."""
    p = Producer({"bootstrap.servers": bootstrap})
    # the writer's next id, epoch and a time in order: only the payload is wrong
    headers = make_headers(TupleType.STABLE, next_id, 1_750_000_000_000, epoch=epoch)
    p.produce(topic, b"\xff\xfe not avro", b"s1", partition=0, headers=headers)
    p.produce(topic, b"\x02a\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00", b"s1", partition=0)
    p.flush()


def test_node_metrics_move_as_tuples_flow_and_its_log_is_one_line_per_event(kafka: Any, tmp_path: Path) -> None:
    spec, path = unique_spec(SPEC, tmp_path)
    u = spec.name.split("-")[1]
    create_topics(spec, kafka.bootstrap)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    log = tmp_path / "node.log"
    env = {**os.environ, "HASTREAM_BOOTSTRAP": kafka.bootstrap, "HASTREAM_METRICS_PORT": str(port)}
    env.pop("HASTREAM_METRICS_HOST", None)
    argv = [sys.executable, "-m", "services.cli.main", "node", "run", str(path), "n"]
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    try:
        first = wait_scraped(lambda: scrape(url), 30, "/metrics answering")
        assert value(first, "hastream_node_consumed_total") == 0
        w = SourceWriter(spec, f"in_{u}", kafka.bootstrap)
        for rec in readings(300, sensors=5, seed=2, step_ms=10):
            w.send(rec)
        w.boundary()
        w.flush()
        after = wait_scraped(
            lambda: (s := scrape(url)) and value(s, "hastream_node_consumed_total") >= 301 and s,
            30,
            "301 input messages consumed",
        )
        assert value(after, "hastream_node_produced_total") > 0
        after = wait_scraped(
            lambda: (s := scrape(url)) and value(s, "hastream_node_state", state="STABLE") == 1 and s,
            10,
            "the replica STABLE once it caught up",
        )
        assert value(after, "hastream_node_state", state="FAILED") == 0
        assert 0 <= value(after, "hastream_node_heartbeat_age_seconds") < 2
        assert ("hastream_node_input_lag", frozenset({("input", f"in_{u}")})) in after
        assert ("hastream_node_reconciliation_seconds_count", frozenset()) in after

        _garbage(kafka.bootstrap, spec.topic(f"in_{u}"), w.next_id[0], w.epoch)
        bad = wait_scraped(
            lambda: (
                (s := scrape(url))
                and sum(v for (n, _), v in s.items() if n == "hastream_node_deadlettered_total") >= 2
                and s
            ),
            20,
            "two dead-lettered messages",
        )
        assert value(bad, "hastream_node_deadlettered_total", reason="invalid_avro") == 1
        assert value(bad, "hastream_node_deadlettered_total", reason="missing_headers") == 1

        produced = value(bad, "hastream_node_produced_total")
        for rec in readings(100, sensors=5, seed=3, step_ms=10, start_ms=1_800_000_000_000):
            w.send(rec)
        w.boundary()
        w.flush()
        more = wait_scraped(
            lambda: (s := scrape(url)) and value(s, "hastream_node_consumed_total") >= 404 and s,
            30,
            "the next 101 messages consumed",
        )
        assert value(more, "hastream_node_produced_total") > produced
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        print(log.read_text()[-4000:])  # shown when the test fails
    with pytest.raises(OSError):
        scrape(url)  # stopped with the service
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    logged = [ln for ln in lines if LINE.match(ln)]
    assert len(logged) >= 2, lines  # the epoch and the start line at least
    others = [ln for ln in lines if not LINE.match(ln) and "stopped: consumed" not in ln]
    assert others == [], f"lines not in the one format: {others[:5]}"
