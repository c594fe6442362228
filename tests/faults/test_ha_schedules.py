"""Seeded random fault schedules on a chain of HA nodes, each node with its own scheme (ICDE 2005,
section 8: passive standby near the sources, upstream backup further down, or any mix).

Three nodes under the coordinator: a map, a sliding window and a filter on the window's results,
each given passive standby, active standby or upstream backup by the seed, precise or rollback
recovery, and two replicas (an active standby node sometimes three). When the filter is under
upstream backup, the window writes a log read only by a stateless upstream backup node, whose
trims the window's own takeovers must survive; the coordinator trims logs all along, so faults
come during trims. In a fifth of the runs the map is a replicated DPC node instead, whose stable
stream the HA nodes below take (a fault on it kills one of its replicas, which comes back).
A quarter of the runs have two partitions per node (each a process per replica, each its own
primary and takeovers). One to three faults per run, each on a partition of a node, at random
times while input flows, of these classes (a broker killed during a takeover is in
``test_ha_broker_schedule``, on three brokers):

- ``kill``: kill -9 of a node's current primary (its replica restarts and rejoins as secondary);
- ``stop``: SIGSTOP of it past the detection time (woken up later, it must exit, and is restarted);
- ``secondary``: kill -9 of a secondary;
- ``both``: kill -9 of the primary, then of the new primary during its own takeover, before the
  old one is back: with two replicas none is left until the first returns;
- ``coordinator``: kill -9 of the coordinator with the primary; a new coordinator, started
  later, finishes the takeover the dead one never ordered;
- ``coordinator_stop``: SIGSTOP of the coordinator while the primary is killed, woken later;
- ``emptied`` (a quarter of the runs, first): the source stops after a boundary past its tuples
  (as a source idle for a while says), the trims take its log down to the writer's tail, and a
  new writer process goes on from there (``restarted`` below a DPC node, which trims nothing).

Every scheme here can give precise recovery for these nodes (``hastream validate``) and gives
repeating rollback otherwise. So:

- a client reads the failure-free output tuple for tuple, ids 0..n-1, whatever the recovery
  (its readers drop an id they have, as every node does);
- the log of a node with precise recovery holds each tuple once; the log of a node with
  rollback recovery is repeating (nothing lost, duplicates identical, in order), each repeated
  run within about an interval and a bucket of its output (and a second of slack), one per
  takeover of that node (counted in its replicas' logs: on a loaded machine a new primary that
  stands still past the detection time is failed over too, and exits to come back as secondary,
  as a supervisor restarts it here). A log that upstream backup trimmed is checked from its start.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from infra.kafka.cluster import KafkaCluster
from services.deploy import processes
from services.ha.guarantee import repeated_runs
from services.log.tail import first_offset, tail_offset
from tests.integration.ha_rig import HaRig
from tests.integration.helpers import three_brokers, wait_for

pytestmark = pytest.mark.integration

CHAIN = """\
name: hachain-{{u}}
defaults: {{partitions: {p}}}
streams:
  in_{{u}}: {{schema: reading, key: sensor}}
  scaled_{{u}}: {{schema: reading, key: sensor}}
  win_{{u}}: {{schema: window_stat, key: key{wp}}}
  out_{{u}}: {{schema: window_stat, key: key{wp}}}
operators:
  scale: {{type: map, input: in_{{u}}, output: scaled_{{u}}, fields: {{sensor: sensor, ts: ts, value: "value * 2", seq: seq}}}}
  win: {{type: window, input: scaled_{{u}}, output: win_{{u}}, key: sensor, size: 400, slide: 100,
        aggregates: {{count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}}}
  busy: {{type: filter, input: win_{{u}}, output: out_{{u}}, where: "count > 1"}}
nodes:
  {n1}
  n2: {{operators: [win], replicas: {k2}, ha: {{scheme: {s2}, recovery: {r2}, interval_ms: 50, heartbeat_ms: {hb}}}}}
  n3: {{operators: [busy], replicas: {k3}, ha: {{scheme: {s3}, recovery: {r3}, interval_ms: 50, heartbeat_ms: {hb}}}}}
"""
SCHEMES = ("passive_standby", "active_standby", "upstream_backup")
RECOVERIES = ("precise", "rollback")
NODES = ("n1", "n2", "n3")
OUTPUTS = {"n1": "scaled", "n2": "win", "n3": "out"}
RATE, COUNT = 200, 2000  # 10 s of input
ROLLBACK_S = 0.05 + 0.1 + 1.0  # a repeated run at most: an interval, a bucket, slack for the machine


KINDS = ("kill", "stop", "secondary", "both", "coordinator", "coordinator_stop")  # + "emptied", drawn apart
# Takeovers each fault makes at least (the second of "both" may be killed before it starts its own)
TAKEOVERS = {"kill": 1, "stop": 1, "secondary": 0, "both": 1, "coordinator": 1, "coordinator_stop": 1, "dpc": 0}
HA_N1 = "n1: {{operators: [scale], replicas: {k1}, ha: {{scheme: {s1}, recovery: {r1}, interval_ms: 50, heartbeat_ms: {hb}}}}}"
DPC_N1 = "n1: {{operators: [scale], replicas: 2}}"  # a replicated DPC node: the HA nodes below take its stable stream
DOWN_S = 1.5  # how long the coordinator is gone, or both replicas are
# Detection, misses (3) x the keep-alive: a deployment sizes it to its machine. Two partitions run
# twice the processes (up to 14 on 2 cores here), which wait for a core longer than 300 ms at times.
HEARTBEAT_MS = {1: 100, 2: 200}
EMPTIED_S, GAP_MS = 1.0, 2000  # when an emptied source stops, and how far its time jumps meanwhile


@dataclass(frozen=True)
class Fault:
    at_s: float  # after the input starts
    node: str  # "source" for an emptied source
    kind: str  # one of KINDS, or "emptied"
    part: int = 0


@dataclass(frozen=True)
class Plan:
    schemes: tuple[str, str, str]
    recoveries: tuple[str, str, str]
    replicas: tuple[int, int, int]
    faults: list[Fault]
    partitions: int = 1
    # n2 and n3 in this many partitions, not ``partitions``: n1's output crosses an exchange to n2
    window_partitions: int | None = None

    def parts(self, node: str) -> range:
        """The partitions of ``node``."""
        return range(self.window_partitions if node != "n1" and self.window_partitions else self.partitions)


def random_schedule(seed: int, kinds: tuple[str, ...] = KINDS, emptied: bool = True, wide: bool = True) -> Plan:
    """The seed's schemes, recoveries, replica and partition counts for n1..n3, and one to three faults
    at least 2.5 s apart, an emptied source before them in a quarter of the runs (``emptied``); two
    partitions in a quarter (``wide``)."""
    rnd = random.Random(seed)
    schemes = (SCHEMES[seed % 3], SCHEMES[(seed // 3) % 3], rnd.choice(SCHEMES))
    recoveries = (rnd.choice(RECOVERIES), rnd.choice(RECOVERIES), rnd.choice(RECOVERIES))
    replicas = tuple(3 if s == "active_standby" and rnd.random() < 0.4 else 2 for s in schemes)
    faults, t = [], 1.0
    for _ in range(rnd.randint(1, 3)):
        t += rnd.uniform(0.2, 2.0)
        faults.append(Fault(round(t, 2), rnd.choice(NODES), rnd.choice(kinds)))
        t += 2.5
    # drawn last, so that a seed's schemes and faults stay as they were before these draws came
    partitions = 2 if rnd.random() < 0.25 and wide else 1
    faults = [Fault(f.at_s, f.node, f.kind, rnd.randrange(partitions)) for f in faults]
    if emptied and rnd.random() < 0.25:
        faults.insert(0, Fault(EMPTIED_S, "source", "emptied"))
    if emptied and rnd.random() < 0.2:  # n1 a DPC node: a fault there kills one of its replicas
        schemes, replicas = ("dpc", schemes[1], schemes[2]), (2, replicas[1], replicas[2])
        faults = [Fault(f.at_s, f.node, "dpc", f.part) if f.node == "n1" else f for f in faults]
        # a DPC node's input is never trimmed: the source just stops and comes back as a new writer
        faults = [Fault(f.at_s, f.node, "restarted", f.part) if f.kind == "emptied" else f for f in faults]
    return Plan(schemes, recoveries, (replicas[0], replicas[1], replicas[2]), faults, partitions)


def exchange_schedule(seed: int) -> Plan:
    """``random_schedule``'s schemes and faults on a chain whose n1 (2 partitions) feeds n2 and n3 (3)
    over an exchange: each fault on a partition of its node drawn anew."""
    plan = random_schedule(seed, emptied=False, wide=False)
    rnd = random.Random(seed * 7 + 1)
    shaped = Plan(plan.schemes, plan.recoveries, plan.replicas, [], 2, 3)
    faults = [Fault(f.at_s, f.node, f.kind, rnd.choice(list(shaped.parts(f.node)))) for f in plan.faults]
    return Plan(plan.schemes, plan.recoveries, plan.replicas, faults, 2, 3)


Broker = Callable[[], Callable[[], None]]  # kills a broker; returns what brings it back


def run_schedule(bootstrap: str, tmp_path: Path, seed: int, plan: Plan, broker: Broker | None = None) -> None:
    """``plan`` run on ``bootstrap``; ``broker``: called at each primary's kill (``kill`` faults)."""
    (s1, s2, s3), (r1, r2, r3), (k1, k2, k3) = plan.schemes, plan.recoveries, plan.replicas
    hb = HEARTBEAT_MS[2 if plan.window_partitions else plan.partitions]
    n1 = (DPC_N1 if s1 == "dpc" else HA_N1).format(k1=k1, s1=s1, r1=r1, hb=hb)
    wp = f", partitions: {plan.window_partitions}" if plan.window_partitions else ""
    text = CHAIN.format(n1=n1, s2=s2, s3=s3, r2=r2, r3=r3, k2=k2, k3=k3, p=plan.partitions, hb=hb, wp=wp)
    ha = [n for n, scheme in zip(NODES, plan.schemes, strict=True) if scheme != "dpc"]
    # 4 sensors per partition (8: 4 in each of 2); across the exchange 12, so every connection has data
    sensors = 12 if plan.window_partitions else 4 * plan.partitions
    rig = HaRig(bootstrap, tmp_path, text, COUNT, RATE, sensors=sensors)
    replicas = dict(zip(NODES, plan.replicas, strict=True))
    for n in NODES:
        for r in range(replicas[n]):
            for p in plan.parts(n):
                rig.start(n, r, p)
    try:
        for n in ha:
            for p in plan.parts(n):
                rig.primary(n, None, 90, p)
        emptied = any(f.kind in ("emptied", "restarted") for f in plan.faults)
        if emptied:
            gap_at = _gap(rig)
        rig.feed()
        if emptied:
            assert rig.sources is not None
            rig.sources.pause_at(gap_at, rig.workload[rig.input][gap_at]["ts"])
        began = time.monotonic()
        for f in plan.faults:
            time.sleep(max(0.0, began + f.at_s - time.monotonic()))
            if f.kind in ("emptied", "restarted"):
                _restart_source(rig, plan.partitions if f.kind == "emptied" else 0)
            else:
                _fault(rig, f, replicas[f.node], broker)
                if broker is not None:  # heartbeats held up by the broker's failure fail over other nodes too
                    for n in ha:
                        for p in plan.parts(n):
                            rig.settled(n, part=p)
        where = f"seed {seed}: {plan}"
        for p in plan.parts("n3"):
            for stream in ("out", "scaled") if s1 == "dpc" else ("out",):  # and the DPC node's stable stream
                want, got = rig.outputs(f"{stream}_{rig.u}", part=p)
                assert len(got) == len(want), f"{where}: {stream} p{p}: {len(got)} results, failure-free {len(want)}"
                assert got == want, f"{where}: {stream} p{p}: the output differs from the failure-free run"
        for node, recovery in zip(NODES, plan.recoveries, strict=True):
            for p in plan.parts(node) if node in ha else ():
                planned = sum(TAKEOVERS[f.kind] for f in plan.faults if (f.node, f.part) == (node, p))
                takeovers = rig.takeovers(node, p)
                assert takeovers >= planned, f"{where}: {node} p{p} took over {takeovers} times, {planned} planned"
                _check_log(rig, node, p, recovery, takeovers, f"{where}: p{p}")
    finally:
        rig.close()


def _gap(rig: HaRig) -> int:
    """The input's time jumps ``GAP_MS`` at the record due ``EMPTIED_S`` into it (where the source stops
    for a while); returns that record's index."""
    k = int(EMPTIED_S * RATE)
    recs = rig.workload[rig.input]
    rig.workload[rig.input] = recs[:k] + [{**r, "ts": r["ts"] + GAP_MS} for r in recs[k:]]
    return k


def _restart_source(rig: HaRig, emptied: int) -> None:
    """The source stopped after a boundary past every tuple it sent (``_gap``): the readers process them
    all and say so. Once the trims have taken the log's first ``emptied`` partitions down to the
    writer's tail, a new writer process goes on from there (ha-review D1: an emptied log must not
    restart its ids or epoch)."""
    assert rig.sources is not None
    rig.sources.wait_paused(30)
    topic = rig.spec.topic(rig.input)
    for p in range(emptied):
        at_tail = partial(_at_tail, rig.bootstrap, topic, p)
        wait_for(at_tail, 30, f"the trims to empty {topic}[{p}] down to its writer's tail")
    rig.sources.resume()


def _at_tail(bootstrap: str, topic: str, part: int) -> bool:
    return first_offset(bootstrap, topic, part) >= tail_offset(bootstrap, topic, part)


def _fault(rig: HaRig, f: Fault, replicas: int, broker: Broker | None) -> None:
    """Inflict ``f`` on partition ``f.part`` of its node and wait until every replica of it is back
    (the killed ones rejoined)."""
    node, part = f.node, f.part
    if f.kind == "dpc":  # no primary: one replica killed, back after a while
        victim = int(f.at_s * 100) % 2
        processes.kill(rig.proc(node, victim, part))
        time.sleep(DOWN_S)
        rig.start(node, victim, part)
        return
    rig.settled(node, part=part)  # a primary failed over for standing still (a loaded start) is back as secondary
    victim = rig.primary(node, part=part)
    if f.kind == "secondary":
        victim = next(r for r in range(replicas) if r != victim)
        processes.kill(rig.proc(node, victim, part))
    elif f.kind == "stop":
        p = rig.proc(node, victim, part)
        processes.pause(p)
        rig.primary(node, victim, part=part)
        time.sleep(0.3)
        processes.resume(p)  # fenced: it must stop by itself
        assert processes.wait_gone(p, 20), f"{node} p{part} r{victim} went on after it was failed over and woke up"
    elif f.kind == "both":
        processes.kill(rig.proc(node, victim, part))
        second = rig.primary(node, victim, part=part)
        processes.kill(rig.proc(node, second, part))  # in its own takeover, before the first is back
        time.sleep(DOWN_S)
        rig.start(node, second, part)
        rig.primary(node, victim, 60, part)
    elif f.kind in ("coordinator", "coordinator_stop"):
        coordinator = rig.coordinator.proc
        assert coordinator is not None
        if f.kind == "coordinator":
            rig.coordinator.kill9()
        else:
            processes.pause(coordinator)
        processes.kill(rig.proc(node, victim, part))
        time.sleep(DOWN_S)
        if f.kind == "coordinator":
            rig.coordinator.start()  # a new process: it never saw the failure
        else:
            processes.resume(coordinator)
        rig.primary(node, victim, 60, part)
    else:
        processes.kill(rig.proc(node, victim, part))
        restore = broker() if broker is not None else None
        try:
            rig.primary(node, victim, 60, part)
        finally:  # the cluster whole again, also for the seeds after a failed one
            if restore is not None:
                restore()
    rig.start(node, victim, part)  # it rejoins as secondary
    rig.settled(node, part=part)


def _check_log(rig: HaRig, node: str, part: int, recovery: str, takeovers: int, where: str) -> None:
    """The node's output log (partition ``part``) as its recovery type defines it, from its start
    (upstream backup downstream may have trimmed it)."""
    stream = f"{OUTPUTS[node]}_{rig.u}"
    for log in rig.output_logs(stream, part):  # one, or one per connection where the stream crosses an exchange
        if recovery == "precise":
            stored = rig.stored_at(*log)
            runs = repeated_runs(stored, stored[0][0] if stored else 0)  # raises on a lost tuple or a changed duplicate
            assert runs == [], f"{where}: {node}'s log {log} repeats {runs}"
            continue
        try:
            rig.assert_repeating(stream, takeovers, ROLLBACK_S, COUNT / RATE, part, log)
        except AssertionError as e:
            raise AssertionError(f"{where}: {node}: {e}") from e


def test_ha_fault_schedule_quick(kafka: Any, tmp_path: Path) -> None:
    """All three schemes, an emptied source, then a primary stopped past the detection time."""
    run_schedule(kafka.bootstrap, tmp_path, 30, random_schedule(30))


@pytest.mark.slow
def test_ha_fault_schedule_with_the_coordinator_and_both_replicas(kafka: Any, tmp_path: Path) -> None:
    """The coordinator killed during a takeover, then both replicas of a node down at once."""
    plan = random_schedule(11)
    faults = [Fault(1.5, "n1", "coordinator"), Fault(5.0, "n2", "both")]  # upstream backup, then passive standby
    plan = Plan(plan.schemes, plan.recoveries, plan.replicas, faults)
    run_schedule(kafka.bootstrap, tmp_path, 11, plan)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100))
def test_ha_fault_schedule(kafka: Any, tmp_path: Path, seed: int) -> None:
    run_schedule(kafka.bootstrap, tmp_path, seed, random_schedule(seed))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_ha_fault_schedule_across_an_exchange(kafka: Any, tmp_path: Path, seed: int) -> None:
    """n1 in 2 partitions feeds n2 and n3 in 3 over an exchange: each connection of n1's output is a
    log its recovery type defines, and each of n3's partitions ends with the failure-free output."""
    run_schedule(kafka.bootstrap, tmp_path, seed, exchange_schedule(seed))


# The cluster's failure detection sized for this test's load: three broker JVMs and up to 14 node
# processes on 2 cores. With ``FAILOVER_PROPS`` (a 1 s broker session, heartbeats every 100 ms)
# the controller's event queue fell behind ("controller event queue overloaded. Timed out heartbeat
# from broker"): it fenced live brokers, every ISR shrank below its minimum, and no write was
# acknowledged for half a minute, so no takeover could finish (seeds 100 and 102-104).
PACED = {
    "broker.heartbeat.interval.ms": 500,
    "broker.session.timeout.ms": 4000,
    "controller.quorum.fetch.timeout.ms": 3000,
    "controller.quorum.election.timeout.ms": 1000,
    "controller.quorum.election.backoff.max.ms": 1000,
}


@pytest.fixture(scope="module")
def paced3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three brokers (RF 3, min ISR 2) whose failure detection ``PACED`` sizes to this machine's load."""
    yield from three_brokers(tmp_path_factory, "paced3", PACED)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 110))
def test_ha_broker_schedule(paced3: KafkaCluster, tmp_path: Path, seed: int) -> None:
    """A broker killed as a primary is: its takeover reads, claims and writes on two brokers of three.
    One partition per node: three brokers and 14 node processes overload 2 cores."""
    rnd = random.Random(seed)

    def kill_broker() -> Callable[[], None]:
        i = rnd.randrange(3)
        paced3.kill_broker(i)
        return partial(_restart_broker, paced3, i)

    plan = random_schedule(seed, ("kill",), emptied=False, wide=False)
    run_schedule(paced3.bootstrap, tmp_path, seed, plan, kill_broker)


def _restart_broker(cluster: KafkaCluster, i: int) -> None:
    """Broker ``i`` back, and caught up: a next kill before then would leave partitions below min ISR."""
    cluster.start_broker(i)
    cluster.wait_in_sync(120)
