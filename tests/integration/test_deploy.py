"""`hastream up / produce / tail / status / down` as a user runs them, with real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.client.source import readings
from services.core.partitioner import key_bytes, partition_for
from services.operators.reference import evaluate
from tests.integration.helpers import unique_spec

pytestmark = pytest.mark.integration

CHAIN = """\
name: chain-{u}
defaults: {partitions: 2}
streams:
  src_{u}: {schema: reading, key: sensor}
  warm_{u}: {schema: reading, key: sensor}
  stats_{u}: {schema: window_stat, key: key}
operators:
  warm: {type: filter, input: src_{u}, output: warm_{u}, where: "value >= 25"}
  win: {type: window, input: warm_{u}, output: stats_{u}, key: sensor, size: 1000,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  first: {operators: [warm]}
  second: {operators: [win]}
"""


def hastream(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_up_produce_tail_down(kafka, tmp_path: Path) -> None:
    spec, path = unique_spec(CHAIN, tmp_path)
    u = spec.name.split("-")[1]
    env = {**os.environ, "HASTREAM_HOME": str(tmp_path / "home")}
    env.pop("HASTREAM_BOOTSTRAP", None)  # the deployment's own record must be enough for later commands
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
    want = evaluate(spec, {f"src_{u}": inputs})[f"stats_{u}"]
    assert sum(map(len, want)) > 0
    for p in range(2):
        mine = [t["value"] for t in got if t["partition"] == p]
        assert mine == want[p], f"partition {p} differs from the reference"
        assert [t["id"] for t in got if t["partition"] == p] == list(range(len(mine)))
        assert all(t["type"] == "STABLE" for t in got)


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
