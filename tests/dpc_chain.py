"""The replicated 3-node chain that the DPC fault tests run (Borealis DPC).

Every run sends the same paced workload through s1, s2, s3 -> n1 -> n2 -> n3 with two
replicas per node, each a real process. A failure-free run gives the expected output;
each fault schedule (kill -9, SIGSTOP/SIGCONT, a stopped source, overlapping) must end
with the same stable output on every replica, tuple for tuple, never undo a stable tuple,
and keep new results coming within the delay bound X while an input is down.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from bench.harness import Recorder, ServiceProcesses
from bench.workload import PacedSources, readings_workload
from services.control.monitor import ReplicaMonitor
from services.core.tuples import TupleType
from services.deploy.local import provision
from services.dpc.states import NodeState
from tests.integration.helpers import unique_spec

CHAIN = """\
name: chain-{u}
defaults: {partitions: 1, replicas: 2}
dpc: {delay: 3000, bucket: 100, restart_image_interval: 1000, heartbeat_interval: 100, failure_timeout: 800,
      reconciliation: RECONCILIATION}
streams:
  s1_{u}: {schema: reading, key: sensor}
  s2_{u}: {schema: reading, key: sensor}
  s3_{u}: {schema: reading, key: sensor}
  all_{u}: {schema: reading, key: sensor}
  merged_{u}: {schema: reading, key: sensor}
  scaled_{u}: {schema: reading, key: sensor}
  stats_{u}: {schema: window_stat, key: key}
operators:
  merge: {type: union, inputs: [s1_{u}, s2_{u}, s3_{u}], output: all_{u}}
  valid: {type: filter, input: all_{u}, output: merged_{u}, where: "value > -50"}
  scale: {type: map, input: merged_{u}, output: scaled_{u}, fields: {sensor: sensor, ts: ts, value: "value * 2", seq: seq}}
  per_sensor: {type: window, input: scaled_{u}, output: stats_{u}, key: sensor, size: 1000, slide: 500,
               aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n1: {operators: [merge, valid]}
  n2: {operators: [scale]}
  n3: {operators: [per_sensor]}
"""
RATE = 100  # tuples per second per source; event time advances 10 ms per tuple
SECONDS = 10
X = 3.0
SLACK = 1.5  # scheduling on a 2-core machine shared with the broker and six services
BASE = 1_700_000_000_000


def workload(names: list[str]) -> dict[str, list[dict[str, Any]]]:
    return readings_workload(names, RATE * SECONDS, RATE, sensors=4, start_ms=BASE)


@dataclass
class Run:
    spec: Any
    recorder: Recorder
    sources: PacedSources
    log_dir: Path

    def stream(self, base: str) -> str:
        return next(s for s in self.spec.streams if s.startswith(base + "_"))

    def final(self, base: str, replica: int) -> list:
        return self.recorder.replica(self.stream(base), replica).final_stable()


Fault = Callable[[ServiceProcesses, PacedSources], None]


def run_chain(
    kafka: Any,
    tmp_path: Path,
    schedule: list[tuple[float, Fault]],
    expect: Run | None,
    reconciliation: str = "checkpoint",
) -> Run:
    spec, path = unique_spec(CHAIN.replace("RECONCILIATION", reconciliation), tmp_path)
    assert all(spec.reconciliation_of(n) == reconciliation for n in spec.nodes)
    provision(spec, kafka.bootstrap)
    services = ServiceProcesses(spec, path, kafka.bootstrap, tmp_path / "logs")
    services.start()
    mon = ReplicaMonitor(kafka.bootstrap, spec.heartbeat_topic, spec.dpc.failure_timeout / 1000)
    names = [s for s in spec.sources()]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            mon.state(n, 0, r) is NodeState.STABLE for n in spec.nodes for r in range(2)
        ):
            time.sleep(0.2)
        recorder = Recorder(
            spec, kafka.bootstrap, [s for s in spec.streams if spec.stream_topics(s) and s not in names]
        )
        sources = PacedSources(spec, kafka.bootstrap, workload(names), RATE).start()
        t0 = time.monotonic()
        for at, fault in sorted(schedule, key=lambda f: f[0]):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            fault(services, sources)
        sources.join(SECONDS + 60)
        run = Run(spec, recorder, sources, tmp_path / "logs")
        sink = run.stream("stats")
        if expect is not None:
            bases = ("merged", "scaled", "stats")
            want = {b: len(expect.final(b, 0)) for b in bases}
            recorder.wait_for(lambda: all(len(run.final(b, r)) >= want[b] for b in bases for r in range(2)), 90)
        else:
            last = -1
            while True:  # failure-free: wait until the output stops growing
                time.sleep(3)
                n = len(run.recorder.replica(sink, 0).final_stable())
                if n == last:
                    break
                last = n
        return run
    finally:
        mon.close()
        services.stop()
        if "recorder" in locals():
            recorder.close()


def check_eventual_consistency(run: Run, failure_free: Run) -> None:
    """Every replica of every node output ends with the failure-free stable sequence; nothing stable undone."""
    for base in ("merged", "scaled", "stats"):
        want = failure_free.final(base, 0)
        for r in range(2):
            got = run.final(base, r)
            assert len(got) == len(want), f"{base}.r{r}: {len(got)} stable tuples, failure-free run had {len(want)}"
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                assert g == w, f"{base}.r{r}, stable tuple {i}: {g} != failure-free {w}"
    for key, out in run.recorder.outputs.items():
        assert out.undid_stable() == [], f"{key}: a stable tuple was undone"


def summary(run: Run) -> str:
    sink = [run.recorder.replica(run.stream("stats"), r) for r in range(2)]
    return (
        f"tentative={[o.count(TupleType.TENTATIVE) for o in sink]} undo={[o.count(TupleType.UNDO) for o in sink]} "
        f"rec_done={[o.count(TupleType.REC_DONE) for o in sink]} max_delay_new={max_delay_new(run):.2f}s"
    )


def max_delay_new(run: Run) -> float:
    """Longest wait, over every window result, from its last input being generated to any version of it arriving."""
    first: dict[int, float] = {}
    for r in range(2):
        for m in run.recorder.replica(run.stream("stats"), r).messages:
            if m.type in (TupleType.STABLE, TupleType.TENTATIVE):
                first[m.stime] = min(first.get(m.stime, m.at), m.at)
    sent = run.sources.sent_at
    delays = [at - sent[end - 10] for end, at in first.items() if end - 10 in sent]
    return max(delays)


def kill(role: str) -> Fault:
    return lambda s, _: s.kill(role)


def restart(role: str) -> Fault:
    return lambda s, _: s.start(role)


def pause(role: str) -> Fault:
    return lambda s, _: s.pause(role)


def resume(role: str) -> Fault:
    return lambda s, _: s.resume(role)


def stop_source(n: int, seconds: float) -> Fault:
    def f(_: ServiceProcesses, src: PacedSources) -> None:
        src.hold(next(s for s in src.writers if s.startswith(f"s{n}_")), seconds)

    return f


def random_schedule(seed: int) -> list[tuple[float, Fault]]:
    """One to three overlapping faults at random times, each on a different replica or source:
    kill -9 then restart, SIGSTOP then SIGCONT, or a source that stops for a while."""
    rng = random.Random(seed)
    roles = rng.sample([f"n{n}.r{r}.p0" for n in (1, 2, 3) for r in (0, 1)], 3)
    out: list[tuple[float, Fault]] = []
    if rng.random() < 0.3:  # the coordinator dies too: the data path must not care
        at = round(rng.uniform(1.0, 6.0), 1)
        out += [(at, kill("coordinator")), (at + round(rng.uniform(1.0, 4.0), 1), restart("coordinator"))]
    for role in roles[: rng.randint(1, 3)]:
        at, d = round(rng.uniform(1.0, 6.0), 1), round(rng.uniform(1.0, 4.0), 1)
        kind = rng.choice(["kill", "pause", "source"])
        if kind == "kill":
            out += [(at, kill(role)), (at + d, restart(role))]
        elif kind == "pause":
            out += [(at, pause(role)), (at + d, resume(role))]
        else:
            out.append((at, stop_source(int(role[1]), d)))
    return out


@pytest.fixture(scope="session")
def failure_free(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The chain run without faults: what every fault run must end with (shared by the fault tests)."""
    return run_chain(kafka, tmp_path_factory.mktemp("ff"), [], None)
