"""``hastream source end|dead``: a node stops waiting for an input that will send nothing more.

One source goes quiet for good while the other goes on; the node's results are tentative.
Once the quiet stream is ended (or declared dead), the node reconciles and every result is
stable, computed without the missing stream, with dense ids.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from services.client.source import SourceWriter
from services.client.workload import readings
from services.core.config import Settings
from services.node.loop import NodeService
from services.operators.reference import canonical
from services.schemes import build_scheme
from tests.integration.helpers import create_topics, read_stream, unique_spec

pytestmark = pytest.mark.integration

SPEC = """\
name: ends-{u}
defaults: {partitions: 1}
dpc: {delay: 600, bucket: 100, heartbeat_interval: 100, failure_timeout: 800}
streams:
  a_{u}: {schema: reading, key: sensor}
  b_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  both: {type: union, inputs: [a_{u}, b_{u}], output: out_{u}}
nodes:
  n: {operators: [both]}
"""


@pytest.mark.parametrize("how", ["end", "dead"])
def test_results_become_stable_without_a_stream_that_ended_or_died(kafka, tmp_path: Path, how: str) -> None:
    spec, path = unique_spec(SPEC, tmp_path)
    u = spec.name.split("-")[1]
    create_topics(spec, kafka.bootstrap)
    a, b = SourceWriter(spec, f"a_{u}", kafka.bootstrap), SourceWriter(spec, f"b_{u}", kafka.bootstrap)
    recs_b = list(readings(10, sensors=2, seed=2, step_ms=10, start_ms=0))
    for r in recs_b:
        b.send(r)
    b.boundary(100)
    b.flush()  # and nothing more from b
    recs_a = list(readings(60, sensors=2, seed=1, step_ms=10, start_ms=0))
    for r in recs_a:
        a.send(r)
    a.boundary(1_000)
    a.flush()
    svc = NodeService(spec, "n", 0, 0, Settings(bootstrap=kafka.bootstrap), build_scheme)
    t = threading.Thread(target=svc.run, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while svc.stats.tentative < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert svc.stats.tentative >= 50, "a's tuples past b's boundary are tentative while b is silent"
        cli = [sys.executable, "-m", "services.cli.main", "source", how, str(path), f"b_{u}", "-b", kafka.bootstrap]
        done = subprocess.run(cli, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "final boundary after ids [9]" in done.stdout
        deadline = time.monotonic() + 30
        while svc.stats.reconciliations < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert svc.stats.reconciliations == 1, "the ended stream no longer holds the node in failure"
    finally:
        svc.stop()
        t.join(30)
    got = read_stream(spec, f"out_{u}", kafka.bootstrap, timeout=10)
    stable = [(x.meta.id, x.value) for x in got if x.meta.type.value == "STABLE"]
    assert [i for i, _ in stable] == list(range(70)), "every tuple of both streams, stable, ids dense"
    assert canonical([v for _, v in stable]) == canonical(recs_a + recs_b)
