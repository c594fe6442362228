"""The control plane on a real broker: liveness is judged by arrival, whatever the sender's clock says."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from services.control import heartbeat
from services.control.heartbeat import HeartbeatSender
from services.control.messages import now_ms
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from tests.integration.helpers import create_topics, unique_spec

pytestmark = pytest.mark.integration

SPEC = """
name: ctl_{u}
defaults: {replicas: 2}
streams:
  src: {schema: reading, key: sensor}
  out: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: src, output: out, where: "True"}
nodes:
  n: {operators: [keep]}
"""


@pytest.mark.parametrize("skew_ms", [-5000, 5000])
def test_a_replica_whose_clock_is_off_is_alive_for_its_readers(
    kafka: Any, tmp_path: Path, monkeypatch: Any, skew_ms: int
) -> None:
    spec, _ = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    monkeypatch.setattr(heartbeat, "now_ms", lambda: now_ms() + skew_ms)  # this replica's host clock is off
    sender = HeartbeatSender(kafka.bootstrap, spec.heartbeat_topic, "n", 0, 1, 0.1).start()
    sender.set_state(NodeState.UPSTREAM_FAILURE)
    monitor = ReplicaMonitor(kafka.bootstrap, spec.heartbeat_topic, spec.dpc.failure_timeout / 1000)
    try:
        deadline = time.monotonic() + 10
        while monitor.state("n", 0, 1) is NodeState.FAILED and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(10):  # and it stays alive, heartbeat after heartbeat
            assert monitor.state("n", 0, 1) is NodeState.UPSTREAM_FAILURE
            time.sleep(0.1)
        sender.stop()
        time.sleep(spec.dpc.failure_timeout / 1000 + 0.3)
        assert monitor.state("n", 0, 1) is NodeState.FAILED, "a silent replica is failed, by local time"
    finally:
        sender.stop()
        monitor.close()


def test_a_fresh_reader_does_not_take_old_heartbeats_for_a_live_replica(kafka: Any, tmp_path: Path) -> None:
    spec, _ = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    sender = HeartbeatSender(kafka.bootstrap, spec.heartbeat_topic, "n", 0, 0, 0.1).start()
    time.sleep(0.5)
    sender.stop()  # the replica dies; its heartbeats stay in the topic
    monitor = ReplicaMonitor(kafka.bootstrap, spec.heartbeat_topic, 5.0)  # a long timeout: history would count
    try:
        time.sleep(0.5)
        st = monitor.get("n", 0, 0)
        assert st is not None and st.state is NodeState.STABLE, "history tells the last state"
        assert monitor.state("n", 0, 0) is NodeState.FAILED, "but not that the replica lives"
    finally:
        monitor.close()
