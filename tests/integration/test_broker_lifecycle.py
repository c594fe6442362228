"""The embedded broker's life as a user lives it, through the real command: kill -9 and resume on
the same ports with the data kept, --fresh, a broker shared by deployments, services and tail
across a broker restart, and a quick ``down`` while the broker is dead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from infra.kafka.cluster import KafkaCluster
from services.client.workload import readings
from services.deploy.processes import pid_alive
from tests.integration.helpers import ONE_FILTER, hastream, unique_spec, user_env

pytestmark = pytest.mark.integration

SPEC = ONE_FILTER


@pytest.fixture
def home(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A HASTREAM_HOME of its own (deployments and the embedded broker); everything in it stopped at the end."""
    env = user_env(tmp_path / "home")
    yield env
    hastream("down", env=env, timeout=120)
    kdir = tmp_path / "home" / "kafka"
    if (kdir / "cluster.json").exists():
        KafkaCluster.load(kdir).stop(timeout=10)


def state(env: dict[str, str]) -> dict:
    return json.loads((Path(env["HASTREAM_HOME"]) / "kafka" / "cluster.json").read_text())


def kill_broker(env: dict[str, str]) -> None:
    pid = state(env)["pids"][0]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def count(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "audit"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return high - low
    finally:
        c.close()


def test_kafka_start_resumes_a_crashed_cluster_and_fresh_says_it_deletes(home: dict[str, str]) -> None:
    r = hastream("kafka", "start", env=home)
    assert r.returncode == 0, r.stderr
    first = state(home)
    bootstrap = first["bootstrap"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(100):
        p.produce("kept", str(i).encode())
    assert p.flush(30) == 0

    kill_broker(home)
    r = hastream("kafka", "start", env=home)
    assert r.returncode == 0, r.stderr
    assert "resuming the Kafka cluster" in r.stdout and r.stdout.strip().splitlines()[-1] == bootstrap
    assert state(home)["cluster_id"] == first["cluster_id"] and state(home)["nodes"] == first["nodes"]
    assert count(bootstrap, "kept") == 100, "the data survived the crash"

    assert hastream("kafka", "stop", env=home).returncode == 0
    r = hastream("kafka", "start", "--fresh", env=home)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stdout.splitlines() if "deleting" in line]
    assert len(said) == 1 and bootstrap in said[0], r.stdout
    assert state(home)["cluster_id"] != first["cluster_id"]
    assert "kept" not in AdminClient({"bootstrap.servers": state(home)["bootstrap"]}).list_topics(timeout=10).topics


def test_down_kafka_leaves_a_broker_another_running_deployment_uses(home: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, path_a = unique_spec(SPEC.replace("{name}", "a"), tmp_path / "a")
    b, path_b = unique_spec(SPEC.replace("{name}", "b"), tmp_path / "b")
    for path in (path_a, path_b):
        r = hastream("up", str(path), env=home)  # both on the embedded broker, which the first starts
        assert r.returncode == 0, r.stderr
    bootstrap = state(home)["bootstrap"]

    t0 = time.monotonic()
    r = hastream("down", a.name, "--kafka", env=home)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert f"left the Kafka broker at {bootstrap} running: deployment(s) {b.name} use it" in r.stdout, r.stdout
    assert all(KafkaCluster.load(Path(home["HASTREAM_HOME"]) / "kafka").alive())
    assert took < 15, f"down took {took:.1f}s"

    r = hastream("down", b.name, "--kafka", env=home)
    assert r.returncode == 0 and f"stopped the Kafka broker at {bootstrap}" in r.stdout, r.stdout
    assert not any(KafkaCluster.load(Path(home["HASTREAM_HOME"]) / "kafka").alive())


def _jsonl(path: Path, n: int, seed: int, start_ms: int) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in readings(n, sensors=5, seed=seed, start_ms=start_ms)))
    return path


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_services_and_tail_survive_a_broker_restart_and_down_is_quick_without_it(
    home: dict[str, str], tmp_path: Path
) -> None:
    spec, path = unique_spec(SPEC.replace("{name}", "restart"), tmp_path)
    u = spec.name.split("-")[1]
    r = hastream("up", str(path), env=home)
    assert r.returncode == 0, r.stderr
    bootstrap = state(home)["bootstrap"]
    first = _jsonl(tmp_path / "first.jsonl", 300, 1, 1_000)
    r = hastream("produce", str(path), f"src_{u}", "--json", str(first), "--keep-open", env=home)
    assert r.returncode == 0, r.stderr
    tail = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "tail",
            str(path),
            f"out_{u}",
            "--json",
            "--stable-only",
            "--limit",
            "600",
        ],
        env=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)
        kill_broker(home)
        time.sleep(8)  # services, coordinator and tail retry all this while
        r = hastream("kafka", "start", env=home)
        assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == bootstrap, r.stdout + r.stderr
        second = _jsonl(tmp_path / "second.jsonl", 300, 2, 100_000)
        r = hastream("produce", str(path), f"src_{u}", "--json", str(second), env=home)
        assert r.returncode == 0, r.stderr
        out, err = tail.communicate(timeout=120)
    finally:
        if tail.poll() is None:
            tail.kill()
    got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    stable = [t["id"] for t in got if t["type"] == "STABLE"]
    assert stable == list(range(600)), f"every tuple, once, in order: got {len(stable)}; tail said {err[-2000:]}"
    waits = [line for line in err.splitlines() if "waiting for the Kafka broker" in line]
    assert len(waits) == 1 and bootstrap in waits[0] and len(err.splitlines()) <= 3, err[-3000:]
    for log in (Path(home["HASTREAM_HOME"]) / "deployments" / spec.name / "logs").glob("*.log"):
        text = log.read_text(errors="replace")
        mentions = [line for line in text.splitlines() if bootstrap in line]
        assert len(mentions) <= 6, f"{log.name}: {len(mentions)} lines about the broker, e.g. {mentions[-3:]}"
    status = hastream("status", spec.name, env=home)
    assert status.stdout.count(" yes ") == 2, status.stdout  # the node and the coordinator run

    kill_broker(home)
    time.sleep(8)  # services are deep in their retries when down comes
    t0 = time.monotonic()
    r = hastream("down", spec.name, env=home)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert took < 10, f"down with the broker dead took {took:.1f}s"
