"""The replicated 3-node chain that the DPC fault tests run (Borealis DPC).

Every run sends the same paced workload through s1, s2, s3 -> n1 -> n2 -> n3 with two
replicas per node, each a real process. A failure-free run of the same ``Shape`` (length,
rate, partitions) gives the expected output; each fault schedule (kill -9, SIGSTOP/SIGCONT,
a stopped or flapping source, both replicas of a node killed, the coordinator killed while
replicas reconcile, a broker killed, overlapping) must end with the same stable output on
every replica and partition, tuple for tuple and ids included, never undo a stable tuple,
and, when a source fails, produce tentative results within the delay bound X and then
correct them (UNDO, stable corrections, REC_DONE).

A ``Schedule`` is the list of timed faults ``run_chain`` carries out, and remembers what it
did: which sources were down when, which replicas were down when. ``check_schedule`` turns
that into the checks every fault test makes.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import pytest
from confluent_kafka.admin import AdminClient

from bench.harness import Recorder, ReplicaOutput, ServiceProcesses, wait_primary
from bench.workload import PacedSources, readings_workload
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.core.tuples import TupleType
from services.deploy.topics import provision
from services.spec.egress import egress_units
from services.spec.topics import all_topics
from tests.integration.helpers import unique_spec

CHAIN = """\
name: chain-{u}
defaults: {partitions: PARTITIONS, replicas: 2}
dpc: {delay: DELAY, alpha: ALPHA, bucket: 100, restart_image_interval: 1000, heartbeat_interval: 100, failure_timeout: TIMEOUT,
      reconciliation: RECONCILIATION, max_kept: MAX_KEPT}
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
# The Spark variant: n3's window runs in Spark, and a Python node n4 follows it (its BOUNDARY drives n4).
SPARK_NODES = """\
  n3: {operators: [per_sensor], engine: spark, flush_ms: 1000}
  n4: {operators: [busy]}
"""
SPARK_PARTS = (
    ("  stats_{u}: {schema: window_stat, key: key}\n", "  busy_{u}: {schema: window_stat, key: key}\n"),
    ("operators:\n", '  busy: {type: filter, input: stats_{u}, output: busy_{u}, where: "count > 1"}\n'),
)
# The side-input variant: n3 also reads a source s4, so while an upstream replica of n3 is down its
# other input keeps arriving, and n3 waits for the missing one (a single-input node has nothing to wait with).
SIDE_PARTS = (
    ("  s3_{u}: {schema: reading, key: sensor}\n", "  s4_{u}: {schema: reading, key: sensor}\n"),
    ("  stats_{u}: {schema: window_stat, key: key}\n", "  both_{u}: {schema: reading, key: sensor}\n"),
    ("operators:\n", "  side: {type: union, inputs: [scaled_{u}, s4_{u}], output: both_{u}}\n"),
)
# The CEC variant: n3 keeps its window's parts in its output log, checked whenever a crash would replay
# over 60 input tuples (n3 reads about 300 a second).
CEC_NODE = "checkpoint: {method: cec, q: 1000, u: 60, cp_ms: 20}"
NODES = ("n1", "n2", "n3")
OUTPUTS = ("merged", "scaled", "stats")  # the node outputs whose replicas are compared
RATE = 100  # tuples per second per source; event time advances 10 ms per tuple
SECONDS = 10
X = 3.0
STARTUP_S = 60.0  # for every replica to come up STABLE (twice that with two Spark nodes' JVMs on 2 cores)
SLACK = 1.5  # scheduling on a 2-core machine shared with the broker and six services
BASE = 1_700_000_000_000


@dataclass(frozen=True)
class Shape:
    """What a chain run sends and how it is laid out; a fault run is compared with a failure-free run of its shape.

    With 2 partitions use 8 sensors: sensors s0..s3 all hash to partition 0 of 2.
    """

    seconds: int = SECONDS
    rate: int = RATE
    partitions: int = 1
    sensors: int = 4
    delay: int = 3000  # X in ms: dpc.delay of the spec
    # dpc.alpha: a node's wait is alpha * X (0.9 s), shorter than most source failures of the
    # schedules, so that they make results tentative.
    alpha: float = 0.3
    failure_timeout: int = 800  # dpc.failure_timeout in ms
    max_kept: int = 100_000  # dpc.max_kept of the spec
    spark: bool = False  # n3 on Spark, followed by n4
    side: bool = False  # n3 unions a source s4 with n2's output before its window
    egress: tuple[str, ...] = ()  # the sink's egresses by mode, 2 replicas each (``tests/egress_chain.py``)
    # n3 (the window) in this many partitions, not ``partitions``: n2's output then crosses an
    # exchange to it (``services.spec.exchanges``), one connection per partition pair.
    window_partitions: int | None = None
    window_processes: int | None = None  # n3's ``processes:``: each of its processes hosts several partitions
    cec: bool = False  # n3 keeps its window in CEC (``CEC_NODE``), not in restart images

    @property
    def nodes(self) -> tuple[str, ...]:
        return (*NODES, "n4") if self.spark else NODES

    @property
    def outputs(self) -> tuple[str, ...]:
        """The node outputs whose replicas are compared."""
        return (*OUTPUTS, "busy") if self.spark else OUTPUTS

    @property
    def x(self) -> float:
        return self.delay / 1000

    @property
    def step_ms(self) -> int:
        return 1000 // self.rate

    def same_output(self, other: Shape) -> bool:
        """Whether runs of both shapes must give the same output: the memory bound, the delay and the
        failure detection never change it, nor does an egress, nor how many processes host a node's partitions,
        nor the store a node keeps its state in."""
        same = replace(other, max_kept=self.max_kept, alpha=self.alpha, failure_timeout=self.failure_timeout)
        same = replace(same, window_processes=self.window_processes)  # how partitions share processes neither
        same = replace(same, cec=self.cec)  # nor where a node keeps its state
        return replace(same, egress=self.egress) == self


DEFAULT = Shape()
CEC = Shape(cec=True)  # its output is the default chain's (``same_output``)
# An X that covers a broker failure on the ``crowded3`` cluster: X x (1 - alpha) >= failure_timeout + F
# with F = 4.6 s at worst (docs/dpc.md, "The delay budget across a broker failure").
BROKER_BUDGET = Shape(delay=8000)
TWO_PARTITIONS = Shape(partitions=2, sensors=8)
# n1 and n2 in 2 partitions, the window n3 in 3: n2's output crosses an exchange (6 connections, each
# with data from 12 sensors).
EXCHANGE = Shape(partitions=2, sensors=12, window_partitions=3)
# A Spark node adds its flush interval and a Spark job (~0.3 s idle, up to ~1.2 s on this 2-core host
# running two Spark replicas, eight other services and the broker) to every result, and a job holds
# its loop: tentative input read during one starts its wait late. X covers the path of a result
# made tentative: n1's wait (alpha x X = 1.36 s), n3's wait started up to a job late (1.36 + 1.2 s),
# n3's flush interval (1 s) and the job that emits it (1.2 s), 6.1 s before any transport. At
# X = 6 s the longest wait measured 7.1 s here and 8.5 s in a loaded CI run.
SPARK = Shape(spark=True, delay=8000, alpha=0.17)


def chain_text(shape: Shape, reconciliation: str) -> str:
    """The chain spec of ``shape`` (streams and topics still to be made unique)."""
    text = CHAIN.replace("RECONCILIATION", reconciliation).replace("PARTITIONS", str(shape.partitions))
    text = text.replace("DELAY", str(shape.delay)).replace("MAX_KEPT", str(shape.max_kept))
    text = text.replace("ALPHA", str(shape.alpha)).replace("TIMEOUT", str(shape.failure_timeout))
    if shape.side:
        text = text.replace(
            "per_sensor: {type: window, input: scaled_{u}", "per_sensor: {type: window, input: both_{u}"
        )
        text = text.replace("  n3: {operators: [per_sensor]}\n", "  n3: {operators: [side, per_sensor]}\n")
        for anchor, added in SIDE_PARTS:
            i = text.index(anchor) + len(anchor)
            text = text[:i] + added + text[i:]
    if shape.window_partitions is not None:
        stats = "  stats_{u}: {schema: window_stat, key: key}\n"
        text = text.replace(stats, stats[:-2] + f", partitions: {shape.window_partitions}}}\n")
    if shape.window_processes is not None:
        text = text.replace(
            "  n3: {operators: [per_sensor]}\n",
            f"  n3: {{operators: [per_sensor], processes: {shape.window_processes}}}\n",
        )
    if shape.cec:
        text = text.replace("  n3: {operators: [per_sensor]", "  n3: {operators: [per_sensor], " + CEC_NODE)
    if shape.egress:
        stats = "  stats_{u}: {schema: window_stat, key: key}\n"
        egress = ", ".join(f"{{mode: {m}, replicas: 2}}" for m in shape.egress)
        text = text.replace(stats, stats[:-2] + f", egress: [{egress}]}}\n")
    if shape.spark:
        text = text.replace("  n3: {operators: [per_sensor]}\n", SPARK_NODES)
        for anchor, added in SPARK_PARTS:
            i = text.index(anchor) + len(anchor)
            text = text[:i] + added + text[i:]
    return text


def workload(names: list[str], shape: Shape = DEFAULT) -> dict[str, list[dict[str, Any]]]:
    return readings_workload(names, shape.rate * shape.seconds, shape.rate, sensors=shape.sensors, start_ms=BASE)


@dataclass
class Run:
    spec: Any
    recorder: Recorder
    sources: PacedSources
    log_dir: Path
    shape: Shape = DEFAULT
    t0: float = 0.0  # monotonic time the workload started: schedule times are relative to it

    def stream(self, base: str) -> str:
        return next(s for s in self.spec.streams if s.startswith(base + "_"))

    def partitions(self) -> range:
        """The partitions of the chain's output (the window results)."""
        return self.places("stats")

    def places(self, base: str) -> range:
        """Where a node output is compared: its partitions, or where it crosses an exchange its
        connections (``Recorder.replica``)."""
        s = self.stream(base)
        return range(len(self.spec.stream_topics(s)) // self.spec.logs_of_stream(s) * self.spec.topic_partitions(s))

    def output(self, base: str, replica: int, partition: int = 0) -> ReplicaOutput:
        return self.recorder.replica(self.stream(base), replica, partition)

    def final(self, base: str, replica: int, partition: int = 0) -> list:
        return self.output(base, replica, partition).final_stable()

    def sink(self) -> list[ReplicaOutput]:
        """Every replica topic partition of the chain's output (the window results)."""
        return [self.output("stats", r, p) for r in range(2) for p in self.partitions()]


Fault = Callable[[ServiceProcesses, PacedSources], None]


def run_chain(
    kafka: Any,
    tmp_path: Path,
    schedule: list[tuple[float, Fault]],
    expect: Run | None,
    reconciliation: str = "checkpoint",
    shape: Shape | None = None,
    settle: Callable[[Run], None] | None = None,
) -> Run:
    """Run the chain through ``schedule`` (seconds after the workload starts); with ``expect``,
    the run has its shape and lasts until every replica has as much stable output as it, and then
    ``settle`` (a check that needs the services still running: an egress's topic)."""
    shape = shape or (expect.shape if expect is not None else DEFAULT)
    if expect is not None:
        assert shape.same_output(expect.shape), f"compared with a failure-free run of another shape: {expect.shape}"
    spec, path = unique_spec(chain_text(shape, reconciliation), tmp_path)
    assert all(spec.reconciliation_of(n) == reconciliation for n in spec.nodes)
    provision(spec, kafka.bootstrap)
    services = ServiceProcesses(spec, path, kafka.bootstrap, tmp_path / "logs")
    services.start()
    mon = ReplicaMonitor(kafka.bootstrap, spec.heartbeat_topic, spec.dpc.failure_timeout / 1000)
    names = [s for s in spec.sources()]
    units = [(n, p) for n in spec.nodes for p in range(spec.node_partitions(n))]
    try:
        wait_s = STARTUP_S * (2 if shape.spark else 1)  # two Spark JVMs start slowly
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not all(
            mon.state(n, p, r) is NodeState.STABLE for n, p in units for r in range(2)
        ):
            time.sleep(0.2)
        late = [f"{n}.r{r}.p{p}" for n, p in units for r in range(2) if mon.state(n, p, r) is not NodeState.STABLE]
        assert not late, f"not STABLE {wait_s:.0f} s after they started (logs in {tmp_path / 'logs'}): {late}"
        for name in egress_units(spec):  # and each egress partition has its primary
            for p in range(spec.streams[next(s for s in spec.streams if s.startswith("stats_"))].partitions):
                wait_primary(mon, name, None, 60, 2, p)
        recorder = Recorder(
            spec, kafka.bootstrap, [s for s in spec.streams if spec.stream_topics(s) and s not in names]
        )
        sources = PacedSources(spec, kafka.bootstrap, workload(names, shape), shape.rate).start()
        t0 = time.monotonic()
        for at, fault in sorted(schedule, key=lambda f: f[0]):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            fault(services, sources)
        sources.join(shape.seconds + 60)
        run = Run(spec, recorder, sources, tmp_path / "logs", shape, t0)
        if expect is not None:
            want = {(b, p): len(expect.final(b, 0, p)) for b in shape.outputs for p in run.places(b)}
            recorder.wait_for(
                lambda: all(len(run.final(b, r, p)) >= n for (b, p), n in want.items() for r in range(2)),
                90 + 2 * shape.seconds,
            )
            if settle is not None:
                settle(run)
        else:
            last = -1
            while True:  # failure-free: wait until the output stops growing
                time.sleep(3)
                n = sum(len(run.final(b, r, p)) for b in shape.outputs for r in range(2) for p in run.places(b))
                if n == last:
                    break
                last = n
            for b in shape.outputs:
                for p in run.places(b):
                    r0, r1 = run.final(b, 0, p), run.final(b, 1, p)
                    assert r0 and r0 == r1, f"failure-free run: {b}[{p}] has {len(r0)} and {len(r1)} stable tuples"
        return run
    finally:
        mon.close()
        services.stop()
        if "recorder" in locals():
            recorder.close()


def check_eventual_consistency(run: Run, failure_free: Run) -> None:
    """Every replica and partition of every node output ends with the failure-free stable sequence,
    ids included; nothing stable undone."""
    assert run.shape.same_output(failure_free.shape)
    counts = " ".join(
        f"{b}.r{r}[{p}]={len(run.final(b, r, p))}/{len(failure_free.final(b, 0, p))}"
        for b in run.shape.outputs
        for p in run.places(b)
        for r in range(2)
    )
    for base in run.shape.outputs:
        for p in run.places(base):
            want = failure_free.final(base, 0, p)
            assert want, f"{base}[{p}]: the failure-free run has no stable output there"
            for r in range(2):
                got = run.final(base, r, p)
                where = f"{base}.r{r}[{p}]"
                assert len(got) == len(want), (
                    f"{where}: {len(got)} stable tuples, failure-free run had {len(want)} (all: {counts})"
                )
                for i, (g, w) in enumerate(zip(got, want, strict=True)):
                    assert g == w, f"{where}, stable tuple {i}: {g} != failure-free {w}"
    for key, out in run.recorder.outputs.items():
        assert out.undid_stable() == [], f"{key}: a stable tuple was undone"


def check_source_failure(run: Run, exclude: Sequence[tuple[float, float]] = (), tentative: bool = True) -> None:
    """DPC did its job while a source was down: new results within X (plus slack), tentative ones
    among them (unless ``tentative`` is False), and corrections (UNDO, then REC_DONE) once it healed.
    ``exclude``: intervals (seconds after the start) in which the delay bound cannot hold, because
    every replica of some node was down; results whose input was generated then are not timed."""
    if tentative:
        sink = run.sink()
        n, undo, rec_done = (
            sum(o.count(t) for o in sink) for t in (TupleType.TENTATIVE, TupleType.UNDO, TupleType.REC_DONE)
        )
        assert n > 0, f"a source failed but the chain never went tentative: {summary(run)}"
        assert undo > 0 and rec_done > 0, f"tentative results were never corrected (UNDO, REC_DONE): {summary(run)}"
    delay = max_delay_new(run, exclude)
    if exclude:
        print(
            f"max_delay_new outside the node outages {[(round(a, 1), round(b, 1)) for a, b in exclude]}: {delay:.2f}s"
        )
    x = run.shape.x
    assert delay <= x + SLACK, f"new results waited {delay:.2f}s, more than X = {x}s + {SLACK}s: {summary(run)}"


def summary(run: Run) -> str:
    sink = [run.output("stats", r, p) for r in range(2) for p in run.partitions()]
    return (
        f"tentative={[o.count(TupleType.TENTATIVE) for o in sink]} undo={[o.count(TupleType.UNDO) for o in sink]} "
        f"rec_done={[o.count(TupleType.REC_DONE) for o in sink]} max_delay_new={max_delay_new(run):.2f}s"
    )


def max_delay_new(run: Run, exclude: Sequence[tuple[float, float]] = ()) -> float:
    """Longest wait, over every window result, from its last input being generated to any version of it
    arriving; results whose last input was generated in an ``exclude`` interval (seconds after start) left out."""
    first: dict[tuple[int, int], float] = {}
    for o in run.sink():
        for m in o.messages:
            if m.type in (TupleType.STABLE, TupleType.TENTATIVE):
                first[(m.partition, m.stime)] = min(first.get((m.partition, m.stime), m.at), m.at)
    sent, step = run.sources.sent_at, run.shape.step_ms
    delays = [
        at - sent[end - step]
        for (_, end), at in first.items()
        if end - step in sent and not any(a <= sent[end - step] - run.t0 <= b for a, b in exclude)
    ]
    return max(delays, default=0.0)


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


class Schedule(list[tuple[float, Fault]]):
    """Timed faults for ``run_chain``, built by kind, with what each kind takes down and when.

    Times are seconds after the workload starts. ``sources_down`` and ``replicas_down``
    record the intervals, so the checks know whether a source failed and when a node had
    no replica up (the delay bound assumes one replica of every node is alive)."""

    def __init__(self, partitions: int = 1) -> None:
        super().__init__()
        self.partitions = partitions
        self.sources_down: list[tuple[float, float]] = []
        self.replicas_down: dict[str, list[tuple[float, float]]] = {}
        self.kinds: list[str] = []
        self.broker_restarts: list[threading.Thread] = []

    def _down(self, role: str, start: float, end: float) -> None:
        self.replicas_down.setdefault(role, []).append((start, end))

    def kill(self, role: str, at: float, seconds: float) -> Schedule:
        """kill -9 one node replica (or the coordinator), restart it ``seconds`` later."""
        self += [(at, kill(role)), (at + seconds, restart(role))]
        if role != "coordinator":
            self._down(role, at, at + seconds)
        self.kinds.append(f"kill {role} at {at} for {seconds}")
        return self

    def pause(self, role: str, at: float, seconds: float) -> Schedule:
        """SIGSTOP one node replica, SIGCONT it ``seconds`` later."""
        self += [(at, pause(role)), (at + seconds, resume(role))]
        self._down(role, at, at + seconds)
        self.kinds.append(f"pause {role} at {at} for {seconds}")
        return self

    def stop_source(self, n: int, at: float, seconds: float) -> Schedule:
        """Source ``s<n>`` disconnected: its tuples are generated on time, delivered when it heals."""
        self.append((at, stop_source(n, seconds)))
        self.sources_down.append((at, at + seconds))
        self.kinds.append(f"source s{n} down at {at} for {seconds}")
        return self

    def flap(self, n: int, at: float, down: float, period: float, times: int) -> Schedule:
        """Source ``s<n>`` goes down for ``down`` s every ``period`` s, ``times`` times, from ``at``."""
        assert down < period, "a flapping source comes back between its failures"
        for k in range(times):
            self.append((at + k * period, stop_source(n, down)))
            self.sources_down.append((at + k * period, at + k * period + down))
        self.kinds.append(f"source s{n} flaps at {at}: down {down} every {period}, {times} times")
        return self

    def kill_both(self, node: str, at: float, seconds: float, stagger: float = 0.1, partition: int = 0) -> Schedule:
        """Both replicas of a node partition killed (``stagger`` apart) and restarted (``stagger`` apart):
        nothing of it survives but its logs and restart images."""
        r0, r1 = f"{node}.r0.p{partition}", f"{node}.r1.p{partition}"
        self += [(at, kill(r0)), (at + stagger, kill(r1))]
        self += [(at + seconds, restart(r0)), (at + seconds + stagger, restart(r1))]
        self._down(r0, at, at + seconds)
        self._down(r1, at + stagger, at + seconds + stagger)
        self.kinds.append(f"kill both {node}.p{partition} at {at} for {seconds} (stagger {stagger})")
        return self

    def kill_coordinator_in_reconciliation(
        self, n: int, at: float, seconds: float, after_heal: float, down: float
    ) -> Schedule:
        """Source ``s<n>`` down for ``seconds``; the coordinator killed ``after_heal`` s after it healed,
        while the replicas ask for and hold reconciliation grants, restarted ``down`` s later."""
        self.stop_source(n, at, seconds)
        heal = at + seconds
        self += [(heal + after_heal, kill("coordinator")), (heal + after_heal + down, restart("coordinator"))]
        self.kinds.append(f"kill coordinator {after_heal} after s{n} healed, for {down}")
        return self

    def kill_broker(self, cluster: Any, at: float, seconds: float) -> Schedule:
        """kill -9 the broker that leads the most partitions of the chain's topics (chosen when the fault
        fires), start it again ``seconds`` later in the background (``wait_brokers`` waits for it)."""
        victim: list[int] = []

        def down(s: ServiceProcesses, _: PacedSources) -> None:
            topics = [t for t, _ in all_topics(s.spec)]
            meta = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
            leaders = [p.leader for t in topics if t in meta.topics for p in meta.topics[t].partitions.values()]
            victim.append(max(set(leaders), key=leaders.count))  # broker index = KRaft node id
            cluster.kill_broker(victim[0])
            self.kinds.append(f"(broker {victim[0]} led {leaders.count(victim[0])} of {len(leaders)} partitions)")

        def up(_: ServiceProcesses, __: PacedSources) -> None:
            t = threading.Thread(target=cluster.start_broker, args=(victim[0],), daemon=True)
            t.start()
            self.broker_restarts.append(t)

        self += [(at, down), (at + seconds, up)]
        self.kinds.append(f"kill -9 a broker at {at} for {seconds}")
        return self

    def wait_brokers(self, timeout: float = 180) -> None:
        for t in self.broker_restarts:
            t.join(timeout)

    @property
    def source_failure(self) -> bool:
        return bool(self.sources_down)

    def tentative_expected(self) -> bool:
        """Whether a source failure must show as tentative results: one that no node outage touches, or
        one that lasts a second past its first delay share and past every outage's recovery. A source
        that is down only while every replica of a node is down (or restarting) makes nothing
        tentative: by the time the node is back, the input is whole again."""
        blocked = [(lo, hi + RECOVERY) for lo, hi in self.outages()]
        for a, b in self.sources_down:
            if not any(lo < b and a < hi for lo, hi in blocked):
                return True
            free = [(a + SHARE, b)]
            for lo, hi in blocked:
                free = [part for x, y in free for part in ((x, min(y, lo)), (max(x, hi), y)) if part[1] > part[0]]
            if any(y - x >= 1.0 for x, y in free):
                return True
        return False

    def outages(self) -> list[tuple[float, float]]:
        """Intervals in which every replica of some node partition was down (killed or paused)."""
        out = []
        for role, spans in self.replicas_down.items():
            node, r, p = role.split(".")
            if r != "r0":
                continue
            for a0, b0 in spans:
                for a1, b1 in self.replicas_down.get(f"{node}.r1.{p}", []):
                    if max(a0, a1) < min(b0, b1):
                        out.append((max(a0, a1), min(b0, b1)))
        return out

    def untimed(self) -> list[tuple[float, float]]:
        """Where new results cannot come within X: a node outage, from X before it (results then due
        during it) to RECOVERY after it (the restarted replicas start, restore and catch up)."""
        return [(a - X, b + RECOVERY) for a, b in self.outages()]

    def __str__(self) -> str:
        return "; ".join(self.kinds) or "no faults"


SHARE = 0.9  # a node's wait before it goes tentative: alpha x X (Shape.alpha)
RECOVERY = 5.0  # a restarted node replica's start (interpreter, imports, consumers), restore and catch-up


def check_schedule(run: Run, failure_free: Run, schedule: list[tuple[float, Fault]]) -> None:
    """The checks every fault run makes: the failure-free stable output on every replica (ids included),
    nothing stable undone, and if a source failed, tentative results within X that were then corrected."""
    print(f"{schedule}: {summary(run)}")
    check_eventual_consistency(run, failure_free)
    if isinstance(schedule, Schedule) and schedule.source_failure:
        expected = schedule.tentative_expected()
        if not expected:
            print("the source failures fell inside node outages: no tentative results expected")
        check_source_failure(run, schedule.untimed(), tentative=expected)


def random_schedule(seed: int, shape: Shape = DEFAULT) -> Schedule:
    """One to three overlapping faults at random times, each on a different replica or source, drawn from
    every kind: kill -9 then restart, SIGSTOP then SIGCONT, a stopped source, a flapping source, both
    replicas of a node killed and restarted, the coordinator killed while replicas reconcile after a
    source failure; and in a third of the schedules the coordinator killed at a random time as well.
    Replicas are drawn from every partition of ``shape``'s nodes (partition 0 of the default chain)."""
    rng = random.Random(seed)
    sched = Schedule()
    parts = {1: shape.partitions, 2: shape.partitions, 3: shape.window_partitions or shape.partitions}
    if shape == DEFAULT:
        parts = {1: 1, 2: 1, 3: 1}  # the seeds of the default chain draw as they always did
    roles = rng.sample([f"n{n}.r{r}.p{p}" for n in (1, 2, 3) for p in range(parts[n]) for r in (0, 1)], 3)
    sources = rng.sample([1, 2, 3], 3)
    coordinator_free = True
    if rng.random() < 0.3:  # the coordinator dies too: the data path must not care
        at = round(rng.uniform(1.0, 6.0), 1)
        sched.kill("coordinator", at, round(rng.uniform(1.0, 4.0), 1))
        coordinator_free = False
    busy: set[str] = set()  # replicas a fault already takes down: never two faults on one process
    for role in roles[: rng.randint(1, 3)]:
        if role in busy:
            continue
        partner = role.replace(".r0.", ".r1.") if ".r0." in role else role.replace(".r1.", ".r0.")
        at, d = round(rng.uniform(1.0, 6.0), 1), round(rng.uniform(1.0, 4.0), 1)
        kinds = ["kill", "pause", "source", "flap", "both"] + (["coordinator"] if coordinator_free else [])
        kind = rng.choice(kinds)
        if kind == "both" and partner in busy:
            kind = "kill"
        busy.add(role)
        if kind == "kill":
            sched.kill(role, at, d)
        elif kind == "pause":
            sched.pause(role, at, d)
        elif kind == "source":  # longer than a node's delay share (0.9 s), so the chain goes tentative
            sched.stop_source(sources.pop(), at, round(rng.uniform(1.5, 4.0), 1))
        elif kind == "flap":  # at least two failures within the 10 s workload
            n, start = sources.pop(), round(rng.uniform(1.0, 2.5), 1)
            sched.flap(n, start, round(rng.uniform(1.2, 2.0), 1), round(rng.uniform(3.5, 4.5), 1), 2)
        elif kind == "both":
            busy.add(partner)
            node, partition = role.split(".")[0], int(role.rsplit(".p", 1)[1])
            sched.kill_both(node, at, d, round(rng.uniform(0.0, 0.5), 1), partition)
        else:
            n, start, down = sources.pop(), round(rng.uniform(1.0, 4.0), 1), round(rng.uniform(1.5, 3.0), 1)
            after, gone = round(rng.uniform(0.1, 1.0), 1), round(rng.uniform(1.0, 4.0), 1)
            sched.kill_coordinator_in_reconciliation(n, start, down, after, gone)
            coordinator_free = False
    return sched


class RssSampler:
    """A fault at time 0 that samples the resident memory (VmRSS) of every node replica process every
    ``interval`` s until ``stop()``: ``samples[role]`` is a list of (seconds after start, pid, kB).
    A restarted replica is sampled under its new pid."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.samples: dict[str, list[tuple[float, int, int]]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, services: ServiceProcesses, _: PacedSources) -> None:
        t0 = time.monotonic()

        def run() -> None:
            while not self._stop.is_set():
                for role, proc in list(services.procs.items()):
                    if role != "coordinator" and (kb := vm_rss_kb(proc.pid)) is not None:
                        self.samples.setdefault(role, []).append((time.monotonic() - t0, proc.pid, kb))
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=run, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def vm_rss_kb(pid: int) -> int | None:
    """Resident set size of a process in kB, None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@pytest.fixture(scope="session")
def failure_free(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The chain run without faults: what every fault run must end with (shared by the fault tests)."""
    return run_chain(kafka, tmp_path_factory.mktemp("ff"), [], None)
