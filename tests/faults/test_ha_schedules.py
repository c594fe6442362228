"""Seeded random fault schedules on a chain of HA nodes, each node with its own scheme (ICDE 2005,
section 8: passive standby near the sources, upstream backup further down, or any mix).

Three nodes, two replicas each, under the coordinator: a map, a sliding window and a filter
on the window's results, each given passive standby, active standby or upstream backup by the
seed. One to three faults per run, at random times while input flows: kill -9 of a node's
current primary (its replica restarts and rejoins as secondary), or SIGSTOP of it past the
detection time (it is woken up later, must exit, and is restarted). Every scheme here
promises precise recovery for these nodes (deterministic, ``hastream validate``), so the
final output must equal the failure-free output tuple for tuple, ids 0..n-1.
"""

from __future__ import annotations

import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.workload import PacedSources, readings_workload
from services.client.view import StreamView
from services.control.monitor import ReplicaMonitor
from services.deploy import processes
from services.deploy.local import provision, service_commands, service_env
from services.operators.reference import evaluate
from tests.integration.helpers import CoordinatorProcess, ha_role, unique_spec, wait_for, wait_primary

pytestmark = pytest.mark.integration

CHAIN = """\
name: hachain-{{u}}
defaults: {{partitions: 1}}
streams:
  in_{{u}}: {{schema: reading, key: sensor}}
  scaled_{{u}}: {{schema: reading, key: sensor}}
  win_{{u}}: {{schema: window_stat, key: key}}
  out_{{u}}: {{schema: window_stat, key: key}}
operators:
  scale: {{type: map, input: in_{{u}}, output: scaled_{{u}}, fields: {{sensor: sensor, ts: ts, value: "value * 2", seq: seq}}}}
  win: {{type: window, input: scaled_{{u}}, output: win_{{u}}, key: sensor, size: 400, slide: 100,
        aggregates: {{count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}}}
  busy: {{type: filter, input: win_{{u}}, output: out_{{u}}, where: "count > 1"}}
nodes:
  n1: {{operators: [scale], replicas: 2, ha: {{scheme: {s1}, interval_ms: 50}}}}
  n2: {{operators: [win], replicas: 2, ha: {{scheme: {s2}, interval_ms: 50}}}}
  n3: {{operators: [busy], replicas: 2, ha: {{scheme: {s3}, interval_ms: 50}}}}
"""
SCHEMES = ("passive_standby", "active_standby", "upstream_backup")
NODES = ("n1", "n2", "n3")
RATE, COUNT = 200, 2000  # 10 s of input


@dataclass(frozen=True)
class Fault:
    at_s: float  # after the input starts
    node: str
    kind: str  # "kill" or "stop"


def random_schedule(seed: int) -> tuple[tuple[str, str, str], list[Fault]]:
    """The seed's schemes for n1..n3 and one to three faults, at least 2.5 s apart."""
    rnd = random.Random(seed)
    schemes = (SCHEMES[seed % 3], SCHEMES[(seed // 3) % 3], rnd.choice(SCHEMES))
    faults, t = [], 1.0
    for _ in range(rnd.randint(1, 3)):
        t += rnd.uniform(0.2, 2.0)
        faults.append(Fault(round(t, 2), rnd.choice(NODES), rnd.choice(("kill", "stop"))))
        t += 2.5
    return schemes, faults


def run_schedule(kafka: Any, tmp_path: Path, seed: int) -> None:
    schemes, faults = random_schedule(seed)
    text = CHAIN.format(s1=schemes[0], s2=schemes[1], s3=schemes[2])
    spec, path = unique_spec(text, tmp_path)
    u = spec.name.split("-")[1]
    provision(spec, kafka.bootstrap)
    argv = dict(service_commands(spec, path))
    env, logs = service_env(kafka.bootstrap), tmp_path / "logs"
    logs.mkdir()
    coordinator = CoordinatorProcess(path, kafka.bootstrap, tmp_path)
    coordinator.start()
    procs: dict[tuple[str, int], subprocess.Popen] = {}
    runs: dict[tuple[str, int], int] = {}

    def start(node: str, r: int) -> None:
        runs[(node, r)] = runs.get((node, r), 0) + 1
        procs[(node, r)] = processes.spawn(argv[f"{node}.r{r}.p0"], logs / f"{node}{r}-{runs[(node, r)]}.log", env)

    for n in NODES:
        for r in (0, 1):
            start(n, r)
    mon = ReplicaMonitor(kafka.bootstrap, spec.heartbeat_topic, 1.0)
    workload = readings_workload([f"in_{u}"], COUNT, RATE)
    try:
        for n in NODES:
            wait_primary(mon, n, None, 90)
        sources = PacedSources(spec, kafka.bootstrap, workload, RATE).start()
        began = time.monotonic()
        for f in faults:
            time.sleep(max(0.0, began + f.at_s - time.monotonic()))
            victim = wait_primary(mon, f.node, None, 20)
            p = procs[(f.node, victim)]
            if f.kind == "kill":
                processes.kill(p)
                wait_primary(mon, f.node, victim, 20)
                start(f.node, victim)  # it rejoins as secondary
            else:
                processes.pause(p)
                wait_primary(mon, f.node, victim, 20)
                time.sleep(0.3)
                processes.resume(p)  # fenced: it must stop by itself
                assert processes.wait_gone(p, 20), f"{f.node} r{victim} went on after it was failed over and woke up"
                start(f.node, victim)
            rejoined(mon, f.node, victim)
        sources.join(120)
        want = evaluate(spec, {f"in_{u}": [workload[f"in_{u}"]]}, ended=True)[f"out_{u}"][0]
        with StreamView(spec, f"out_{u}", kafka.bootstrap, stable_only=True) as view:
            view.read_until(lambda v: bool(v.stable(0)) and v.stable(0)[-1] == want[-1], 90)
            time.sleep(1.0)
            view.poll(timeout=0.5)
            got = view.stable(0)
        where = f"seed {seed}: schemes {schemes}, faults {faults}"
        assert len(got) == len(want), f"{where}: {len(got)} results, failure-free {len(want)}"
        assert got == want, f"{where}: the output differs from the failure-free run"
    finally:
        mon.close()
        processes.stop(list(procs.values()), timeout=20, resume_first=True)
        coordinator.stop()


def rejoined(mon: ReplicaMonitor, node: str, replica: int) -> None:
    wait_for(lambda: ha_role(mon, node, replica) == "secondary", 60, f"{node} r{replica} to rejoin as secondary")


def test_ha_fault_schedule_quick(kafka: Any, tmp_path: Path) -> None:
    run_schedule(kafka, tmp_path, 7)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100))
def test_ha_fault_schedule(kafka: Any, tmp_path: Path, seed: int) -> None:
    run_schedule(kafka, tmp_path, seed)
