"""The coordinator's start-up in a running replicated deployment (real broker, real processes).

A replica the coordinator has not heard from yet is STARTING, never FAILED; a coordinator
killed with kill -9 and started again by the supervisor is ready within seconds and never
reports a healthy replica FAILED. The tests assert the sequence of states seen on
``/status``; the times are measured and printed (``-s``), not asserted.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.client.source import SourceWriter
from services.client.workload import readings
from services.coordinator.client import fetch_status, status_url
from services.deploy.deployment import Deployment
from tests.integration.helpers import free_port, hastream, unique_spec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHAIN = """\
name: boot-{u}
defaults: {partitions: 1, replicas: 2}
dpc: {delay: 3000, heartbeat_interval: 100, failure_timeout: 1000}
streams:
  src_{u}: {schema: reading, key: sensor}
  mid_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: src_{u}, output: mid_{u}, where: "value > -1000"}
  twice: {type: map, input: mid_{u}, output: out_{u}, fields: {sensor: sensor, ts: ts, value: "value * 2", seq: seq}}
nodes:
  a: {operators: [keep]}
  b: {operators: [twice]}
"""


class StatusWatch:
    """Polls the coordinator's /status every 50 ms and keeps what it saw: (monotonic time, status or None)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[tuple[float, dict[str, Any] | None]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                st: dict[str, Any] | None = fetch_status(self.url, timeout=1.0)
            except OSError:
                st = None
            self.seen.append((time.monotonic(), st))
            self._stop.wait(0.05)

    def since(self, t0: float) -> list[tuple[float, dict[str, Any] | None]]:
        return [(t, s) for t, s in list(self.seen) if t >= t0]

    def close(self) -> None:
        self._stop.set()
        self._t.join(3)


def states_seen(seen: list[tuple[float, dict[str, Any] | None]]) -> dict[str, list[str]]:
    """Each replica's sequence of states on /status, repeats collapsed."""
    out: dict[str, list[str]] = {}
    for _, st in seen:
        for r in (st or {}).get("replicas", []):
            seq = out.setdefault(r["key"], [])
            if not seq or seq[-1] != r["state"]:
                seq.append(r["state"])
    return out


def _ready_after(watch: StatusWatch, old_pid: int) -> bool:
    """The newest status comes from a coordinator other than ``old_pid``, and it is ready."""
    st = watch.seen[-1][1] if watch.seen else None
    return bool(st is not None and st["pid"] != old_pid and st.get("ready"))


def all_stable(st: dict[str, Any] | None) -> bool:
    return bool(st and st.get("ready") and st["replicas"] and all(r["state"] == "STABLE" for r in st["replicas"]))


@pytest.fixture
def deployment(
    kafka: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, dict[str, str], StatusWatch]]:
    spec, path = unique_spec(CHAIN, tmp_path)
    port = free_port()
    monkeypatch.setenv("HASTREAM_HOME", str(tmp_path / "home"))
    env = {
        **os.environ,
        "HASTREAM_HOME": str(tmp_path / "home"),
        "HASTREAM_COORDINATOR_PORT": str(port),
    }
    env.pop("HASTREAM_BOOTSTRAP", None)
    watch = StatusWatch(status_url(port))
    feeding = threading.Event()
    r = hastream("up", str(path), "--bootstrap", kafka.bootstrap, env=env)
    assert r.returncode == 0, r.stderr
    up_at = time.monotonic()
    feeder = threading.Thread(target=_feed, args=(spec, kafka.bootstrap, feeding), daemon=True)
    feeder.start()
    try:
        yield spec, env, watch
    finally:
        feeding.set()
        feeder.join(5)
        watch.close()
        hastream("down", spec.name, env=env)
    print(f"\nobserved from up: {states_seen(watch.since(up_at))}")


def _feed(spec: Any, bootstrap: str, stop: threading.Event) -> None:
    """A live source: 50 tuples a second with boundaries, so every replica stays STABLE."""
    w = SourceWriter(spec, next(iter(spec.sources())), bootstrap)
    for rec in readings(None, sensors=4, seed=1, wall_clock=True):
        if stop.is_set():
            break
        w.send(rec)
        w.boundary(rec["ts"])
        w.flush()
        time.sleep(0.02)


def test_replicas_not_yet_heard_from_are_starting_not_failed(deployment: tuple) -> None:
    spec, env, watch = deployment
    t0 = time.monotonic()
    wait_for(lambda: all_stable(watch.seen[-1][1] if watch.seen else None), 60, "every replica STABLE")
    stable_after = time.monotonic() - t0
    seqs = states_seen(watch.since(t0))
    print(f"\nafter up: {seqs}; every replica STABLE {stable_after:.1f} s after up returned")
    assert len(seqs) == 4, seqs
    for key, seq in seqs.items():
        assert "FAILED" not in seq, f"{key} was shown FAILED while starting: {seq}"
        assert seq[-1] == "STABLE", f"{key}: {seq}"
    unheard = [r for _, st in watch.since(t0) if st for r in st["replicas"] if not r["seen"]]
    assert all(r["state"] == "STARTING" for r in unheard), unheard[:3]

    # every service serves /metrics on the port the launcher gave it, shown by `hastream status`
    procs = Deployment.load(spec.name).processes
    ports = [p.metrics_port for p in procs]
    assert all(ports) and len(set(ports)) == len(ports), ports
    status = hastream("status", spec.name, env={**env, "COLUMNS": "250"})
    assert all(str(port) in status.stdout for port in ports), status.stdout
    coord = next(p for p in procs if p.role == "coordinator")
    text = urllib.request.urlopen(f"http://127.0.0.1:{coord.metrics_port}/metrics", timeout=5).read().decode()
    assert re.search(r'hastream_coordinator_replicas\{spec="[^"]+",state="STABLE"\} 4\.0', text), text
    assert "hastream_coordinator_grants_total" in text and "hastream_coordinator_heartbeat_age_seconds" in text
    node = next(p for p in procs if p.role == "b.r1.p0")
    text = urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=5).read().decode()
    assert re.search(r'hastream_node_state\{[^}]*state="STABLE"\} 1\.0', text), text


def test_coordinator_restart_is_ready_in_seconds_and_fails_no_healthy_replica(deployment: tuple) -> None:
    spec, env, watch = deployment
    wait_for(lambda: all_stable(watch.seen[-1][1] if watch.seen else None), 60, "every replica STABLE")
    time.sleep(2)  # the coordinator has committed what it read and written its tables
    for attempt in range(2):
        coord = next(p for p in Deployment.load(spec.name).processes if p.role == "coordinator")
        first_pid = coord.pid
        killed_at = time.monotonic()
        os.kill(coord.pid, signal.SIGKILL)
        wait_for(functools.partial(_ready_after, watch, first_pid), 60, "the restarted coordinator ready")
        ready_at = next(t for t, s in watch.since(killed_at) if s is not None and s["pid"] != first_pid and s["ready"])
        time.sleep(3)  # three failure timeouts: a wrong FAILED would show now
        after = watch.since(killed_at)
        seqs = states_seen([(t, s) for t, s in after if s is not None and s["pid"] != first_pid])
        answered = next(t for t, s in after if s is not None and s["pid"] != first_pid)
        print(
            f"\nrestart {attempt + 1}: first answer {answered - killed_at:.1f} s after kill -9, "
            f"ready {ready_at - killed_at:.1f} s after; states: {seqs}"
        )
        assert len(seqs) == 4, seqs
        for key, seq in seqs.items():
            assert "FAILED" not in seq and seq[-1] == "STABLE", f"{key} went through {seq} after the restart"
        once_ready = [s for t, s in after if t >= ready_at and s is not None]
        assert all(all_stable(s) for s in once_ready), "a replica left STABLE once the coordinator was ready"
