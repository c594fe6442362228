"""`hastream up / produce / tail / status / down` as a user runs them, with real processes."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from services.client.workload import readings
from services.core.admin import admin_client
from services.core.partitioner import key_bytes, partition_for
from services.deploy.deployment import Deployment, Process
from services.deploy.processes import pid_alive
from services.operators.reference import evaluate
from services.spec import parse_spec
from tests.integration.helpers import CHAIN, ONE_FILTER, hastream, unique_spec, user_env

pytestmark = pytest.mark.integration


def test_up_produce_tail_down(kafka, tmp_path: Path) -> None:
    spec, path = unique_spec(CHAIN, tmp_path)
    u = spec.name.split("-")[1]
    env = user_env(tmp_path / "home")  # the deployment's own record must be enough for later commands
    records = list(readings(2000, sensors=10, seed=3, step_ms=10))
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    r = hastream("up", str(path), "--bootstrap", kafka.bootstrap, env=env)
    assert r.returncode == 0, r.stderr
    assert "5 processes" in r.stdout  # 4 node partitions + the coordinator
    try:
        r = hastream("produce", str(path), f"src_{u}", "--json", str(tmp_path / "in.jsonl"), env=env)
        assert r.returncode == 0, r.stderr
        assert "produced 2000" in r.stdout
        status = hastream("status", spec.name, env=env)
        assert status.stdout.count("yes") == 5, status.stdout
        tailed = hastream("tail", str(path), f"stats_{u}", "--json", "--idle", "8", env=env)
        assert tailed.returncode == 0, tailed.stderr
        got = [json.loads(line) for line in tailed.stdout.splitlines() if line.startswith("{")]
    finally:
        down = hastream("down", spec.name, env=env)
    assert down.returncode == 0, down.stderr
    assert "5 processes" in down.stdout

    # Every service shut down gracefully on SIGTERM: it printed its final counts.
    logs = sorted((tmp_path / "home" / "deployments" / spec.name / "logs").glob("*.p*.log"))
    assert len(logs) == 4
    for log in logs:
        assert "stopped: consumed" in log.read_text(), log.read_text()[-2000:]

    inputs: list[list[dict]] = [[], []]
    for rec in records:
        inputs[partition_for(key_bytes(rec["sensor"]), 2)].append(rec)
    # produce ended the stream: every window closed, every result stable.
    want = evaluate(spec, {f"src_{u}": inputs}, ended=True)[f"stats_{u}"]
    assert sum(map(len, want)) > 0
    for p in range(2):
        mine = [t["value"] for t in got if t["partition"] == p]
        assert mine == want[p], f"partition {p} differs from the reference"
        assert [t["id"] for t in got if t["partition"] == p] == list(range(len(mine)))
        assert all(t["type"] == "STABLE" for t in got)


def test_two_deployments_with_the_same_stream_names_keep_their_data_apart(kafka, tmp_path: Path) -> None:
    """Topics are namespaced per deployment: two specs naming the same streams, deployed side by
    side on one broker and fed different data, each give the output of their own input."""
    env = user_env(tmp_path / "home")
    u = uuid.uuid4().hex[:8]
    deployed = []
    for twin, seed in (("twin-a", 1), ("twin-b", 2)):
        path = tmp_path / f"{twin}.yaml"
        path.write_text(ONE_FILTER.replace("{name}", twin).replace("{u}", u))
        records = list(readings(300, sensors=3, seed=seed, step_ms=10))
        (tmp_path / f"{twin}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        listed = hastream("validate", str(path), "--topics", env=env)
        assert listed.returncode == 0, listed.stderr
        deployed.append((path, records, set(listed.stdout.split()[1::2])))
    assert not deployed[0][2] & deployed[1][2], "no topic in common"
    try:
        for path, _, _ in deployed:
            r = hastream("up", str(path), "--bootstrap", kafka.bootstrap, env=env)
            assert r.returncode == 0, r.stderr
        for path, _, _ in deployed:
            r = hastream("produce", str(path), f"src_{u}", "--json", str(path.with_suffix(".jsonl")), env=env)
            assert r.returncode == 0, r.stderr
        for path, records, _ in deployed:
            tailed = hastream("tail", str(path), f"out_{u}", "--json", "--idle", "5", env=env)
            assert tailed.returncode == 0, tailed.stderr
            got = [json.loads(line) for line in tailed.stdout.splitlines() if line.startswith("{")]
            want = evaluate(parse_spec(path.read_text()), {f"src_{u}": [records]}, ended=True)
            assert [t["value"] for t in got] == want[f"out_{u}"][0], path.name
    finally:
        for path, _, _ in deployed:
            hastream("down", f"{path.stem}-{u}", env=env)

    # One of them removed with its topics: the other's stay.
    r = hastream("rm", f"twin-a-{u}", "--topics", env=env)
    assert r.returncode == 0 and f"removed deployment 'twin-a-{u}'" in r.stdout, r.stderr
    on_broker = set(admin_client(kafka.bootstrap).list_topics(timeout=10).topics)
    assert not {t for t in on_broker if t.startswith(f"twin-a-{u}.")}, "twin-a's topics are gone"
    assert deployed[1][2] <= on_broker, "twin-b's topics stay"


def test_cli_errors_are_one_readable_line(tmp_path: Path) -> None:
    env = {**os.environ, "HASTREAM_HOME": str(tmp_path)}
    env.pop("HASTREAM_BOOTSTRAP", None)
    bad = tmp_path / "bad.yaml"
    bad.write_text(CHAIN.replace("{u}", "x").replace("input: warm_x", "input: nowhere"))
    cases = [
        (("validate", str(bad)), "unknown stream 'nowhere'"),
        (("validate", str(tmp_path / "missing.yaml")), "no such file"),
        (("down", "nothing-here"), "no deployment 'nothing-here'"),
        (("node", "run", str(bad).replace("bad", "missing")), "Missing argument"),
        (("produce", str(bad), "s", "--rate", "fast"), "Invalid value for '--rate'"),
        (("tail", str(bad).replace("bad", "missing"), "s"), "no such file"),
    ]
    for args, msg in cases:
        r = hastream(*args, env=env)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    good = tmp_path / "good.yaml"
    good.write_text(CHAIN.replace("{u}", "x"))
    r = hastream("produce", str(good), "src_x", "--count", "1", env=env)
    assert r.returncode == 2 and "no broker for 'chain-x'" in r.stderr and "Traceback" not in r.stderr
    r = hastream(
        "node", "run", str(good), "first", "--partition", "5", env={**env, "HASTREAM_BOOTSTRAP": "127.0.0.1:1"}
    )
    assert r.returncode == 2 and "partitions 0..1" in r.stderr


def _status_row(role: str, env: dict[str, str]) -> list[str]:
    """The cells of ``role``'s row in ``hastream status``."""
    r = hastream("status", env={**env, "COLUMNS": "250"})
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if f" {role} " in line)
    return [c.strip() for c in row.strip("│┃ ").split("│")]


def _wait(cond: Callable[[], bool], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def _process(name: str, role: str) -> Process:
    return next(p for p in Deployment.load(name).processes if p.role == role)


def test_a_crashed_service_comes_back_a_fault_kill_stays_down(
    kafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, path = unique_spec(CHAIN, tmp_path)
    monkeypatch.setenv("HASTREAM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HASTREAM_BOOTSTRAP", raising=False)
    env = dict(os.environ)
    r = hastream("up", str(path), "--bootstrap", kafka.bootstrap, env=env)
    assert r.returncode == 0, r.stderr
    dep = Deployment.load(spec.name)
    try:
        crashed = _process(spec.name, "second.r0.p1")
        os.kill(crashed.pid, signal.SIGKILL)  # a crash: nobody told the launcher
        assert _wait(lambda: _process(spec.name, "second.r0.p1").pid != crashed.pid)
        time.sleep(3)  # and it stays up: a node restarted after kill -9 continues from its log
        assert pid_alive(_process(spec.name, "second.r0.p1").pid)
        assert _status_row("second.r0.p1", env)[2:4] == ["yes", "1"]

        r = hastream("fault", "kill", "first.r0.p0", env=env)
        assert r.returncode == 0, r.stderr
        time.sleep(2)  # far longer than a first restart's backoff: held down, not restarted
        assert _status_row("first.r0.p0", env)[2].startswith("held")
        r = hastream("fault", "restart", "first.r0.p0", env=env)
        assert r.returncode == 0, r.stderr
        assert _status_row("first.r0.p0", env)[2:4] == ["yes", "1"]
        running = [p.pid for p in Deployment.load(spec.name).processes]
    finally:
        down = hastream("down", spec.name, env=env)
    assert down.returncode == 0, down.stderr
    assert "5 processes" in down.stdout
    assert Deployment.load(spec.name).processes == []
    time.sleep(1)  # nothing comes back after a clean stop
    assert not any(pid_alive(pid) for pid in running) and not pid_alive(dep.supervisor)
