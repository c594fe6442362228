"""The CLI at its edges, run as a user runs it: an unreachable broker, a missing topic, stopped
deployments, a timed stop-source. Each is one readable line and exit code 2, or a quick answer."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.deploy.deployment import Deployment, Process
from services.deploy.processes import pid_alive, spawn
from tests.integration.helpers import ONE_FILTER, hastream, one_error_line, unique_spec, user_env

pytestmark = pytest.mark.integration

SPEC = ONE_FILTER.replace("{name}", "hyg")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return user_env(tmp_path / "home")


def test_an_unreachable_broker_is_one_line_and_exit_2(tmp_path: Path, env: dict[str, str]) -> None:
    spec, path = unique_spec(SPEC, tmp_path)
    u = spec.name.split("-")[1]
    bootstrap = f"127.0.0.1:{closed_port()}"
    for args in (
        ("produce", str(path), f"src_{u}", "--count", "5"),
        ("tail", str(path), f"out_{u}"),
        ("source", "end", str(path), f"src_{u}"),
    ):
        t0 = time.monotonic()
        r = hastream(*args, "--bootstrap", bootstrap, env=env)
        one_error_line(r, f"the Kafka broker at {bootstrap} is not reachable")
        assert time.monotonic() - t0 < 15, args


def test_a_missing_topic_is_one_line_and_exit_2(kafka, tmp_path: Path, env: dict[str, str]) -> None:
    spec, path = unique_spec(SPEC, tmp_path)  # never deployed: none of its topics exist
    u = spec.name.split("-")[1]
    for args in (("produce", str(path), f"src_{u}", "--count", "5"), ("tail", str(path), f"out_{u}")):
        t0 = time.monotonic()
        r = hastream(*args, "--bootstrap", kafka.bootstrap, env=env)
        one_error_line(r, "on the Kafka broker at")
        assert "no topic" in r.stderr and "hastream up" in r.stderr
        assert time.monotonic() - t0 < 15, args


def _record(name: str, spec_path: Path, bootstrap: str, started: float, procs: list[Process] | None = None) -> None:
    """A deployment record as ``up`` leaves it; stopped unless ``procs`` run."""
    dep = Deployment(name, str(spec_path), bootstrap, None, procs or [], 0, started)
    (dep.dir / "logs").mkdir(parents=True, exist_ok=True)
    dep.save()


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[list[int]]:
    """Pids of stand-in services (sleeping processes), killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _service(tmp_path: Path, role: str, pids: list[int]) -> Process:
    argv = [sys.executable, "-c", "import time; time.sleep(120)"]
    log = tmp_path / f"{role}.log"
    pid = spawn(argv, log, dict(os.environ)).pid
    pids.append(pid)
    return Process(role, pid, str(log), argv)


def test_stopped_deployments_are_quiet_refused_by_fault_and_removable(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, sleeper: list[int]
) -> None:
    monkeypatch.setenv("HASTREAM_HOME", env["HASTREAM_HOME"])
    _, path = unique_spec(SPEC, tmp_path)
    dead = f"127.0.0.1:{closed_port()}"  # the broker these deployments used is gone too
    now = time.time()
    _record("live", path, dead, now - 60, [_service(tmp_path, "n.r0.p0", sleeper)])
    for i in range(3):
        _record(f"old{i}", path, dead, now - i)  # started after 'live', all stopped

    t0 = time.monotonic()
    r = hastream("status", env=env)
    took = time.monotonic() - t0
    assert r.returncode == 0 and r.stderr == "", r.stderr[-3000:]
    assert took < 5, f"status took {took:.1f}s"
    assert "stopped: old0, old1, old2" in r.stdout and "n.r0.p0" in r.stdout

    r = hastream("fault", "pause", "n.r0.p0", env=env)  # the running one, not the newest record
    assert r.returncode == 0, r.stderr
    r = hastream("fault", "resume", "n.r0.p0", env=env)
    assert r.returncode == 0, r.stderr
    one_error_line(hastream("fault", "kill", "n.r0.p0", "-d", "old0", env=env), "deployment 'old0' is stopped")

    r = hastream("rm", "old0", env=env)
    assert r.returncode == 0 and not Deployment.dir_for("old0").exists(), r.stderr
    one_error_line(hastream("rm", "live", env=env), "deployment 'live' is running")
    r = hastream("status", "--prune", env=env)
    assert r.returncode == 0 and "removed 2 stopped deployment(s): old1, old2" in r.stdout, r.stdout
    assert [d.name for d in Deployment.all()] == ["live"]

    os.kill(sleeper[0], signal.SIGKILL)
    one_error_line(hastream("fault", "kill", "n.r0.p0", env=env), "no running deployment")


FAKE_PRODUCER = """
import json, os, signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
signal.signal(signal.SIGUSR1, lambda *_: out.write(f"hold {time.time()}\\n"))
signal.signal(signal.SIGUSR2, lambda *_: out.write(f"release {time.time()}\\n"))
out.write("ready\\n")
while True:
    time.sleep(0.05)
"""


def test_stop_source_for_returns_at_once_and_the_source_resumes_later(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, sleeper: list[int]
) -> None:
    monkeypatch.setenv("HASTREAM_HOME", env["HASTREAM_HOME"])
    from services.deploy import faults

    _, path = unique_spec(SPEC, tmp_path)
    _record("srcdep", path, "127.0.0.1:1", time.time())
    events = tmp_path / "events"
    prod = spawn([sys.executable, "-c", FAKE_PRODUCER, str(events)], tmp_path / "prod.log", dict(os.environ))
    sleeper.append(prod.pid)
    faults.register_source(Deployment.load("srcdep"), "s", prod.pid)
    deadline = time.monotonic() + 10
    while not (events.exists() and "ready" in events.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)

    t0 = time.time()
    r = hastream("fault", "stop-source", "s", "--for", "6", env=env)
    returned = time.time()
    assert r.returncode == 0, r.stderr
    assert returned - t0 < 5, f"stop-source --for 6 blocked {returned - t0:.1f}s"
    assert "resumes by itself in 6s" in r.stdout
    deadline = time.monotonic() + 15
    while "release" not in events.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    got = dict(line.split() for line in events.read_text().splitlines() if " " in line)
    assert 5.5 <= float(got["release"]) - float(got["hold"]) <= 9, got

    events.write_text("")
    t0 = time.time()
    r = hastream("fault", "stop-source", "s", "--for", "1", "--wait", env=env)
    assert r.returncode == 0 and "resumed source 's'" in r.stdout, r.stderr
    assert time.time() - t0 >= 1
    assert "release" in events.read_text()
    assert json.loads(faults.source_file(Deployment.load("srcdep"), "s").read_text())["pid"] == prod.pid
