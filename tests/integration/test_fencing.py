"""Fenced writers on a real broker: a SIGSTOPped node replica is replaced by a second incarnation,
then resumed while input flows. It must not corrupt its topic, and it must stop."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import pytest

from bench.workload import PacedSources, readings_workload
from services.client.view import StreamView
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.deploy import processes
from services.deploy.local import service_commands, service_env
from services.deploy.topics import provision
from services.operators.reference import evaluate
from tests.integration.helpers import unique_spec, wait_for

pytestmark = pytest.mark.integration

SPEC = """\
name: fence-{u}
defaults: {partitions: 1, replicas: 1}
dpc: {delay: 3000, bucket: 100, restart_image_interval: 300, heartbeat_interval: 100, failure_timeout: 800}
streams:
  in_{u}: {schema: reading, key: sensor}
  mid_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: in_{u}, output: mid_{u}, where: "value > -1000"}
  twice: {type: map, input: mid_{u}, output: out_{u}, fields: {sensor: sensor, ts: ts, value: "value * 2", seq: seq}}
nodes:
  n1: {operators: [keep]}
  n2: {operators: [twice]}
"""
RATE, COUNT = 400, 3200  # 8 s of input


def test_a_replaced_replica_that_is_resumed_is_ignored_and_stops(kafka, tmp_path: Path) -> None:
    spec, path = unique_spec(SPEC, tmp_path)
    u = spec.name.split("-")[1]
    provision(spec, kafka.bootstrap)
    argv = dict(service_commands(spec, path))
    env, logs = service_env(kafka.bootstrap), tmp_path / "logs"
    logs.mkdir()
    first = processes.spawn(argv["n1.r0.p0"], logs / "n1-first.log", env)
    procs = [first, processes.spawn(argv["n2.r0.p0"], logs / "n2.log", env)]
    mon = ReplicaMonitor(kafka.bootstrap, spec.heartbeat_topic, spec.dpc.failure_timeout / 1000)
    workload = readings_workload([f"in_{u}"], COUNT, RATE)
    try:
        wait_for(lambda: all(mon.state(n, 0, 0) is NodeState.STABLE for n in ("n1", "n2")), 60, "the nodes to start")
        sources = PacedSources(spec, kafka.bootstrap, workload, RATE).start()
        time.sleep(2.0)
        processes.pause(first)  # hangs: no heartbeats, no output; a supervisor gives up on it
        time.sleep(spec.dpc.failure_timeout / 1000 + 0.5)
        second = processes.spawn(argv["n1.r0.p0"], logs / "n1-second.log", env)
        procs.append(second)
        wait_for(lambda: _speaks(mon, second.pid), 60, "the second incarnation to take over")
        processes.resume(first)  # the old copy wakes up while input flows
        assert processes.wait_gone(first, 20), "the replaced copy went on running after it was resumed"
        assert first.returncode != 0
        said = (logs / "n1-first.log").read_text()
        assert "replaced by a newer incarnation" in said, said[-2000:]
        sources.join(60)

        want = evaluate(spec, {f"in_{u}": [workload[f"in_{u}"]]})
        for stream in (f"mid_{u}", f"out_{u}"):  # as a client reads them; out_ is n2's, from its input port
            n = len(want[stream][0])
            with StreamView(spec, stream, kafka.bootstrap, stable_only=True) as view:
                events = view.read_until(_holds_stable(n), 60)
                time.sleep(1.0)
                events += view.poll(timeout=0.5)
                assert [e.id for e in events] == list(range(n)), f"{stream}: stable ids are not 0..{n - 1} once each"
                assert view.stable(0) == want[stream][0], f"{stream} differs from the failure-free output"
        assert processes.alive(second), "the second incarnation died"
    finally:
        mon.close()
        processes.stop(procs, timeout=20, resume_first=True)


def _speaks(mon: ReplicaMonitor, pid: int) -> bool:
    """n1's replica is STABLE, and the process ``pid`` says so."""
    st = mon.get("n1", 0, 0)
    return st is not None and st.pid == pid and mon.state("n1", 0, 0) is NodeState.STABLE


def _holds_stable(n: int) -> Callable[[StreamView], bool]:
    """A ``read_until`` condition: the view holds at least ``n`` stable records of partition 0."""
    return lambda v: len(v.stable(0)) >= n
