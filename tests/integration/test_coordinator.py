"""The coordinator against a real broker, run as its own process like a deployment runs it.

Replicas are simulated with the real control-plane pieces nodes use (``HeartbeatSender`` and
``ControlMessage`` on the spec's topics), so the test checks the coordinator's side of the
contract: states and failures on ``/status``, one staggered GRANT at a time, and a kill -9
plus restart that recovers the tables from their changelog topics and goes on granting.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from services.control.heartbeat import HeartbeatSender
from services.control.messages import Done, Request, decode_control, encode_control
from services.control.states import NodeState
from services.coordinator.client import fetch_status, status_url
from services.core.kafka import BatchProducer
from services.core.paths import REPO_ROOT
from tests.integration.helpers import CoordinatorProcess, create_topics, unique_spec, wait_for

pytestmark = pytest.mark.integration

SPEC = """
name: coord_{u}
defaults: {partitions: 1, replicas: 3}
dpc: {heartbeat_interval: 100, failure_timeout: 1000}
streams:
  src: {schema: reading, key: sensor}
  out: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: src, output: out, where: "value > 0"}
nodes:
  n: {operators: [keep]}
"""


class ControlLog:
    """Every message on the control topic, read from the start in a background thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.messages: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"test.ctl.{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )
        self._c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(100, 0.1):
                if m.error() is None:
                    with self._lock:
                        self.messages.append(decode_control(m.value() or b"").as_dict())

    def grants(self) -> list[int]:
        """Replicas granted, in order."""
        with self._lock:
            return [m["replica"] for m in self.messages if m["kind"] == "GRANT"]

    def close(self) -> None:
        self._stop.set()
        self._t.join(2)
        self._c.close()


def by_key(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["key"]: r for r in st["replicas"]}


@pytest.fixture
def setup(kafka: Any, tmp_path: Path) -> Iterator[tuple[Any, CoordinatorProcess, BatchProducer, ControlLog]]:
    spec, path = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    coord = CoordinatorProcess(path, kafka.bootstrap, tmp_path)
    producer = BatchProducer(kafka.bootstrap, linger_ms=0)
    ctl = ControlLog(kafka.bootstrap, spec.control_topic)
    try:
        yield spec, coord, producer, ctl
    finally:
        coord.stop()
        ctl.close()
        producer.flush(5)


def test_states_grants_failure_and_restart(setup: tuple, kafka: Any) -> None:
    spec, coord, producer, ctl = setup

    def send(kind: str, replica: int) -> None:
        msg = {"REQUEST": Request, "DONE": Done}[kind]("n", 0, replica)
        producer.send(spec.control_topic, encode_control(msg), b"n", 0)
        producer.flush(5)
        time.sleep(0.005)  # distinct sent_ms: the queue is ordered by send time

    first = coord.start()
    assert first["spec"] == spec.name and first["grants"] == [] and first["pending"] == []
    assert {r["key"] for r in first["replicas"]} == {"n/p0/r0", "n/p0/r1", "n/p0/r2"}  # expected from the spec
    assert not any(r["seen"] for r in first["replicas"])
    page = urllib.request.urlopen(coord.url.rsplit("/", 1)[0] + "/", timeout=5).read().decode()
    assert "<table" in page and spec.name in page

    senders = {r: HeartbeatSender(kafka.bootstrap, spec.heartbeat_topic, "n", 0, r, 0.1).start() for r in (0, 1, 2)}
    try:
        # 1. every replica shows up with the state its heartbeats report
        st = wait_for(
            lambda: (s := coord.status()) and all(r["seen"] and r["state"] == "STABLE" for r in s["replicas"]) and s,
            10,
            "three STABLE replicas on /status",
        )
        assert all(r["age_ms"] < 1000 for r in st["replicas"])
        senders[1].set_state(NodeState.UPSTREAM_FAILURE)
        wait_for(lambda: by_key(coord.status())["n/p0/r1"]["state"] == "UPSTREAM_FAILURE", 5, "r1 UPSTREAM_FAILURE")

        # 2. two REQUESTs for one node partition: exactly one GRANT (the older) until it is DONE
        send("REQUEST", 0)
        send("REQUEST", 1)
        wait_for(lambda: ctl.grants() == [0], 5, "GRANT for r0")
        time.sleep(1.0)  # ten ticks: r1 must still wait
        assert ctl.grants() == [0]
        st = coord.status()
        assert [g["key"] for g in st["grants"]] == ["n/p0/r0"] and [p["key"] for p in st["pending"]] == ["n/p0/r1"]
        send("REQUEST", 0)  # a repeated REQUEST gets its GRANT again, and nothing else changes
        wait_for(lambda: ctl.grants() == [0, 0], 5, "GRANT re-sent to r0")
        send("DONE", 0)
        wait_for(lambda: ctl.grants() == [0, 0, 1], 5, "GRANT for r1 after r0's DONE")

        # 3. a replica that stops heartbeating is FAILED
        senders.pop(2).stop()
        wait_for(lambda: by_key(coord.status())["n/p0/r2"]["state"] == "FAILED", 5, "r2 FAILED")

        # 4. r0 asks again while r1 holds the grant; then the coordinator is killed -9
        send("REQUEST", 0)
        st = wait_for(lambda: (s := coord.status())["pending"] and s, 5, "r0 pending")
        assert [p["key"] for p in st["pending"]] == ["n/p0/r0"] and [g["key"] for g in st["grants"]] == ["n/p0/r1"]
        before = by_key(st)
        # a second coordinator of the same spec refuses to start next to a live one
        (coord.log.parent / "twin").mkdir()
        twin = CoordinatorProcess(coord.spec_path, kafka.bootstrap, coord.log.parent / "twin")
        dup = subprocess.run(twin.argv, env=twin.env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
        assert dup.returncode != 0 and "another coordinator" in dup.stderr, dup.stderr[-2000:]
        coord.kill9()
        grants_before = len(ctl.grants())

        # 5. restarted: tables recovered from the changelog, then the pending request is granted on DONE
        after = coord.start()
        rows = by_key(after)
        assert rows["n/p0/r2"]["state"] == "FAILED" and rows["n/p0/r2"]["seen"]  # known only from the table
        assert rows["n/p0/r2"]["reported"] == "STABLE"
        assert rows["n/p0/r1"]["since_ms"] == before["n/p0/r1"]["since_ms"]  # UPSTREAM_FAILURE since before the kill
        assert rows["n/p0/r1"]["state"] == "UPSTREAM_FAILURE" and rows["n/p0/r0"]["state"] == "STABLE"
        assert [p["key"] for p in after["pending"]] == ["n/p0/r0"]
        assert [g["key"] for g in after["grants"]] == ["n/p0/r1"]
        assert after["pid"] != st["pid"]
        time.sleep(0.5)
        assert len(ctl.grants()) == grants_before  # nothing granted twice by the restart
        send("DONE", 1)
        wait_for(lambda: ctl.grants()[grants_before:] == [0], 5, "GRANT for r0 after restart")
        st = coord.status()
        assert [g["key"] for g in st["grants"]] == ["n/p0/r0"] and st["pending"] == []
    finally:
        for s in senders.values():
            s.stop()


def test_a_burst_of_control_messages_in_one_lz4_batch_is_read(setup: tuple, kafka: Any) -> None:
    """Nodes' producers compress with lz4; a burst goes out as one compressed batch, which the
    coordinator's consumer must decompress like any other."""
    spec, coord, _, ctl = setup
    coord.start()
    burst = BatchProducer(kafka.bootstrap, linger_ms=200)  # the node producer's settings, batching the burst
    senders = {r: HeartbeatSender(kafka.bootstrap, spec.heartbeat_topic, "n", 0, r, 0.1).start() for r in (0, 1, 2)}
    try:
        wait_for(lambda: all(r["seen"] for r in coord.status()["replicas"]), 10, "three replicas seen")
        for _ in range(199):
            burst.send(spec.control_topic, encode_control(Done("n", 0, 2)), b"n", 0)
        burst.send(spec.control_topic, encode_control(Request("n", 0, 1)), b"n", 0)
        burst.flush(10)
        wait_for(lambda: ctl.grants() == [1], 10, "GRANT for the REQUEST at the end of the burst")
    finally:
        for s in senders.values():
            s.stop()


def test_provision_makes_the_tables_changelogs_before_the_worker_starts(kafka: Any, tmp_path: Path) -> None:
    """A changelog faust has not made yet when the first grant is written crashes the control
    agent on every message; provision makes both, compacted, before the worker joins its group."""
    from confluent_kafka.admin import ConfigResource

    from services.coordinator.app import Coordinator
    from services.core.admin import admin_client

    spec, _ = unique_spec(SPEC, tmp_path)
    coord = Coordinator(spec, kafka.bootstrap, data_dir=tmp_path / "coord")
    coord.provision()
    names = [t.changelog_topic.get_topic_name() for t in (coord.replicas, coord.recon)]
    admin = admin_client(kafka.bootstrap)
    assert set(names) <= set(admin.list_topics(timeout=10).topics), "both changelogs exist"
    for name in names:
        (fut,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)]).values()
        assert fut.result()["cleanup.policy"].value == "compact", f"{name} keeps the latest value per key"


def _outside_address() -> str | None:
    """This machine's address on a network other than loopback, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_the_status_page_listens_on_this_machine_only_unless_exposed(setup: tuple) -> None:
    """The page has no authentication: by default only 127.0.0.1 reaches it; --bind 0.0.0.0 exposes it."""
    addr = _outside_address()
    if addr is None:
        pytest.skip("this machine has no address besides loopback to try the page from")
    _, coord, _, _ = setup
    coord.start()
    with pytest.raises(OSError):
        socket.create_connection((addr, coord.port), timeout=3).close()
    coord.stop()
    coord.argv += ["--bind", "0.0.0.0"]
    coord.start()
    assert "replicas" in fetch_status(status_url(coord.port, addr))


def test_status_without_a_coordinator_shows_replicas_not_heard_from_as_starting(kafka: Any, tmp_path: Path) -> None:
    """`hastream status` reads the heartbeats itself when the coordinator is down: a replica with no
    heartbeat yet is STARTING there too, not FAILED."""
    from services.cli.coordinator_cmd import _states_from_heartbeats
    from services.coordinator.app import expected_replicas

    spec, _ = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    expected = expected_replicas(spec)
    rows = _states_from_heartbeats(kafka.bootstrap, spec, expected)
    assert [(r["node"], r["partition"], r["replica"]) for r in rows] == sorted(expected)
    assert {r["state"] for r in rows} == {"STARTING"} and not any(r["seen"] for r in rows)
