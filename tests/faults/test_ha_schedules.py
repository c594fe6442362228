"""Seeded random fault schedules on a chain of HA nodes, each node with its own scheme (ICDE 2005,
section 8: passive standby near the sources, upstream backup further down, or any mix).

Three nodes, two replicas each, under the coordinator: a map, a sliding window and a filter
on the window's results, each given passive standby, active standby or upstream backup by the
seed, and precise or rollback recovery. One to three faults per run, at random times while
input flows: kill -9 of a node's current primary (its replica restarts and rejoins as
secondary), or SIGSTOP of it past the detection time (it is woken up later, must exit, and is
restarted). Every scheme here can give precise recovery for these nodes (deterministic,
``hastream validate``) and gives repeating rollback otherwise. So:

- a client reads the failure-free output tuple for tuple, ids 0..n-1, whatever the recovery
  (its readers drop an id they have, as every node does);
- the log of a node with precise recovery holds each tuple once; the log of a node with
  rollback recovery is repeating (nothing lost, duplicates identical, in order), each repeated
  run within about an interval and a bucket of its output (and a second of slack), one per
  failure of that node. A log that upstream backup trimmed is checked from its start.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.deploy import processes
from services.ha.guarantee import repeated_runs
from tests.integration.ha_rig import HaRig

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
  n1: {{operators: [scale], replicas: 2, ha: {{scheme: {s1}, recovery: {r1}, interval_ms: 50}}}}
  n2: {{operators: [win], replicas: 2, ha: {{scheme: {s2}, recovery: {r2}, interval_ms: 50}}}}
  n3: {{operators: [busy], replicas: 2, ha: {{scheme: {s3}, recovery: {r3}, interval_ms: 50}}}}
"""
SCHEMES = ("passive_standby", "active_standby", "upstream_backup")
RECOVERIES = ("precise", "rollback")
NODES = ("n1", "n2", "n3")
OUTPUTS = {"n1": "scaled", "n2": "win", "n3": "out"}
RATE, COUNT = 200, 2000  # 10 s of input
ROLLBACK_S = 0.05 + 0.1 + 1.0  # a repeated run at most: an interval, a bucket, slack for the machine


@dataclass(frozen=True)
class Fault:
    at_s: float  # after the input starts
    node: str
    kind: str  # "kill" or "stop"


def random_schedule(seed: int) -> tuple[tuple[str, str, str], tuple[str, str, str], list[Fault]]:
    """The seed's schemes and recoveries for n1..n3 and one to three faults, at least 2.5 s apart."""
    rnd = random.Random(seed)
    schemes = (SCHEMES[seed % 3], SCHEMES[(seed // 3) % 3], rnd.choice(SCHEMES))
    recoveries = (rnd.choice(RECOVERIES), rnd.choice(RECOVERIES), rnd.choice(RECOVERIES))
    faults, t = [], 1.0
    for _ in range(rnd.randint(1, 3)):
        t += rnd.uniform(0.2, 2.0)
        faults.append(Fault(round(t, 2), rnd.choice(NODES), rnd.choice(("kill", "stop"))))
        t += 2.5
    return schemes, recoveries, faults


def run_schedule(kafka: Any, tmp_path: Path, seed: int) -> None:
    schemes, recoveries, faults = random_schedule(seed)
    s1, s2, s3 = schemes
    r1, r2, r3 = recoveries
    rig = HaRig(kafka.bootstrap, tmp_path, CHAIN.format(s1=s1, s2=s2, s3=s3, r1=r1, r2=r2, r3=r3), COUNT, RATE)
    for n in NODES:
        for r in (0, 1):
            rig.start(n, r)
    try:
        for n in NODES:
            rig.primary(n, None, 90)
        rig.feed()
        began = time.monotonic()
        for f in faults:
            time.sleep(max(0.0, began + f.at_s - time.monotonic()))
            victim = rig.primary(f.node)
            p = rig.proc(f.node, victim)
            if f.kind == "kill":
                processes.kill(p)
                rig.primary(f.node, victim)
            else:
                processes.pause(p)
                rig.primary(f.node, victim)
                time.sleep(0.3)
                processes.resume(p)  # fenced: it must stop by itself
                assert processes.wait_gone(p, 20), f"{f.node} r{victim} went on after it was failed over and woke up"
            rig.start(f.node, victim)  # it rejoins as secondary
            rig.rejoined(f.node, victim)
        want, got = rig.outputs(f"out_{rig.u}")
        where = f"seed {seed}: schemes {schemes}, recoveries {recoveries}, faults {faults}"
        assert len(got) == len(want), f"{where}: {len(got)} results, failure-free {len(want)}"
        assert got == want, f"{where}: the output differs from the failure-free run"
        for node, recovery in zip(NODES, recoveries, strict=True):
            _check_log(rig, node, recovery, sum(f.node == node for f in faults), where)
    finally:
        rig.close()


def _check_log(rig: HaRig, node: str, recovery: str, failures: int, where: str) -> None:
    """The node's output log as its recovery type defines it, from its start (upstream backup
    downstream may have trimmed it)."""
    stream = f"{OUTPUTS[node]}_{rig.u}"
    if recovery == "precise":
        stored = rig.stored(stream)
        runs = repeated_runs(stored, stored[0][0] if stored else 0)  # raises on a lost tuple or a changed duplicate
        assert runs == [], f"{where}: {node}'s log repeats {runs}"
        return
    try:
        rig.assert_repeating(stream, failures, ROLLBACK_S, COUNT / RATE)
    except AssertionError as e:
        raise AssertionError(f"{where}: {node}: {e}") from e


def test_ha_fault_schedule_quick(kafka: Any, tmp_path: Path) -> None:
    run_schedule(kafka, tmp_path, 7)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100))
def test_ha_fault_schedule(kafka: Any, tmp_path: Path, seed: int) -> None:
    run_schedule(kafka, tmp_path, seed)
