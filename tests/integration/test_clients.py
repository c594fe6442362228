"""Clients on the real broker: sources send boundaries and survive a stop; StreamView follows the best replica.

Replica topics are written by hand here (the wire contract, not a node), with heartbeats
from ``HeartbeatSender``, so each case is exact and fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from services.client.pump import pump
from services.client.source import SourceWriter
from services.client.view import StreamView
from services.client.workload import readings
from services.control.heartbeat import HeartbeatSender
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.core.admin import TopicSpec, ensure_topics
from services.core.codec import codec_for
from services.core.errors import FaultError
from services.core.kafka import BatchProducer
from services.core.partitioner import key_bytes, partition_for
from services.core.tuples import TupleType, make_headers, parse_headers
from services.deploy import faults
from services.deploy.deployment import Deployment, Process
from tests.integration.helpers import hastream, unique_spec

pytestmark = pytest.mark.integration

SPEC = """\
name: clients-{u}
defaults: {partitions: 2}
dpc: {boundary_interval: 50, heartbeat_interval: 100, failure_timeout: 600}
streams:
  src_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  relay: {type: filter, input: src_{u}, output: out_{u}, where: "value > -1000"}
nodes:
  relay: {operators: [relay], replicas: 2}
"""
S, T, U, R = TupleType.STABLE, TupleType.TENTATIVE, TupleType.UNDO, TupleType.REC_DONE
READING = codec_for("reading")


@pytest.fixture
def spec(kafka, tmp_path: Path):
    s, path = unique_spec(SPEC, tmp_path)
    ensure_topics(
        kafka.bootstrap,
        [
            TopicSpec(t, p)
            for t, p in [(t, s.streams[n].partitions) for n in s.streams for t in s.stream_topics(n)]
            + [(s.heartbeat_topic, 1)]
        ],
    )
    assert s.path == path
    return s


def names(spec) -> tuple[str, str]:
    return next(iter(spec.sources())), spec.sinks()[0]


def raw(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 15) -> list:
    """Every message of a topic (all partitions), waiting until ``expect`` arrived or ``timeout``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test.raw", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expect and time.monotonic() < deadline:
            got.extend(m for m in c.consume(1000, 0.2) if m.error() is None)
        got.extend(m for m in c.consume(1000, 0.5) if m.error() is None)  # anything beyond expect
    finally:
        c.close()
    return got


# -- sources --------------------------------------------------------------------


def test_source_boundaries_reach_every_partition_and_keep_their_promise(kafka, spec) -> None:
    src, _ = names(spec)
    w = SourceWriter(spec, src, kafka.bootstrap, wall_clock=True)
    n = pump(w, readings(60, seed=1, wall_clock=True), rate=200)  # 0.3 s: boundaries while pacing
    assert n == 60 and w.boundaries >= 4
    msgs = raw(kafka.bootstrap, spec.topic(src), 2, n + 2 * w.boundaries)
    per: dict[int, list] = {0: [], 1: []}
    for m in sorted(msgs, key=lambda m: (m.partition(), m.offset())):
        per[m.partition()].append((parse_headers(m.headers()), m.value()))
    total = 0
    for p, items in per.items():
        bounds = [meta.stime for meta, v in items if meta.type is TupleType.BOUNDARY]
        assert len(bounds) == w.boundaries, f"partition {p}"
        assert bounds == sorted(bounds) and bounds[-1] > bounds[0]
        promised, last_id = None, -1
        for meta, v in items:
            if meta.type is TupleType.BOUNDARY:
                assert v is None and meta.id == last_id  # the last id sent on this partition
                promised = meta.stime
            else:
                assert meta.id == last_id + 1
                last_id = meta.id
                assert promised is None or meta.stime >= promised  # the boundary's promise holds
                total += 1
    assert total == n
    # The next writer continues the ids after the boundaries.
    w2 = SourceWriter(spec, src, kafka.bootstrap)
    assert w2.next_id == [sum(1 for meta, _ in per[p] if meta.type is S) for p in (0, 1)]
    assert w2.boundary() is None  # no wall clock, nothing sent yet: nothing to promise
    assert w2.boundary(123) == 123


def test_hold_and_release_deliver_every_tuple_once_in_order(kafka, spec) -> None:
    src, _ = names(spec)
    recs = list(readings(300, seed=2))
    w = SourceWriter(spec, src, kafka.bootstrap)
    for r in recs[:100]:
        w.send(r)
    w.boundary()
    w.flush()
    w.hold()
    for r in recs[100:]:
        w.send(r)
        w.maybe_boundary()
    w.boundary()
    w.flush()
    assert w.held and w.held_count >= 200 + 2
    view = StreamView(spec, src, kafka.bootstrap)
    view.read_until(lambda v: sum(len(v.stable(p)) for p in range(2)) >= 100, timeout=10)
    time.sleep(0.5)
    view.poll(0.3)
    assert sum(len(view.stable(p)) for p in range(2)) == 100  # nothing held got out
    assert w.release() >= 202
    w.flush()
    view.read_until(lambda v: sum(len(v.stable(p)) for p in range(2)) >= 300, timeout=10)
    view.poll(0.5)
    view.close()
    want: dict[int, list] = {0: [], 1: []}
    for r in recs:
        want[partition_for(key_bytes(r["sensor"]), 2)].append(r)
    for p in (0, 1):
        assert view.stable(p) == want[p]
        assert view.views[p].duplicates == 0 and view.views[p].gaps == 0 and view.views[p].boundary is not None


def test_request_hold_from_a_signal_applies_at_the_next_call(kafka, spec) -> None:
    src, _ = names(spec)
    w = SourceWriter(spec, src, kafka.bootstrap)
    w.request_hold(True)
    assert not w.held and w.held_or_pending
    w.send(next(readings(1)))
    assert w.held and w.held_count == 1
    w.request_hold(False)
    w.flush()
    assert not w.held and w.held_count == 0


# -- StreamView -----------------------------------------------------------------


def write(producer: BatchProducer, topic: str, p: int, msgs: list[tuple], replica: int) -> None:
    """(type, id, record-or-None) messages to one partition; stime = 10 * id."""
    for ttype, tid, rec in msgs:
        value = READING.encode(rec) if rec is not None else None
        producer.send(topic, value, None, p, make_headers(ttype, tid, 10 * tid, replica))
    producer.flush()


def rec(p: int, i: int, tentative: bool = False) -> dict:
    return {"sensor": f"p{p}", "ts": 10 * i, "value": -1.0 if tentative else float(i), "seq": i}


class Beats:
    """Heartbeats of every (partition, replica) of the spec's one node."""

    def __init__(self, spec, bootstrap: str) -> None:
        node = next(iter(spec.nodes))
        self.senders = {
            (p, r): HeartbeatSender(bootstrap, spec.heartbeat_topic, node, p, r, 0.1)
            for p in range(2)
            for r in range(2)
        }
        for s in self.senders.values():
            s.beat()
            s.start()

    def stop(self, replica: int) -> None:
        for (_, r), s in self.senders.items():
            if r == replica:
                s.stop()

    def close(self) -> None:
        for s in self.senders.values():
            s.stop()


def test_view_switches_to_the_other_replica_after_the_last_stable_id(kafka, spec) -> None:
    _, out = names(spec)
    n, k = 40, 15
    producer = BatchProducer(kafka.bootstrap, linger_ms=0)
    for p in range(2):
        # r1 has everything; r0 stops after k stable tuples and two tentative ones.
        write(producer, spec.topic(out, 1), p, [(S, i, rec(p, i)) for i in range(n)], 1)
        write(
            producer,
            spec.topic(out, 0),
            p,
            [(S, i, rec(p, i)) for i in range(k)] + [(T, k, rec(p, k, True)), (T, k + 1, rec(p, k + 1, True))],
            0,
        )
    beats = Beats(spec, kafka.bootstrap)
    monitor = ReplicaMonitor(kafka.bootstrap, spec.heartbeat_topic, spec.dpc.failure_timeout / 1000)
    node = next(iter(spec.nodes))
    deadline = time.monotonic() + 10  # a loaded machine may deliver the first heartbeats late
    while time.monotonic() < deadline and not all(
        monitor.state(node, p, r) is NodeState.STABLE for p in range(2) for r in range(2)
    ):
        time.sleep(0.05)
    view = StreamView(spec, out, kafka.bootstrap, monitor=monitor)
    try:
        assert view.current == [0, 0]
        events = view.read_until(lambda v: all(len(v.tentative(p)) == 2 for p in range(2)), timeout=10)
        assert view.current == [0, 0] and [len(view.stable(p)) for p in range(2)] == [k, k]
        t0 = time.monotonic()
        beats.stop(0)  # r0 goes silent: FAILED after failure_timeout
        events += view.read_until(lambda v: all(len(v.stable(p)) == n for p in range(2)), timeout=10)
        assert time.monotonic() - t0 < 5
        assert view.monitor is not None
        assert view.monitor.state(next(iter(spec.nodes)), 0, 0) is NodeState.FAILED
        assert view.current == [1, 1]
        view.poll(0.3)
        for p in range(2):
            assert view.stable(p) == [rec(p, i) for i in range(n)]  # no gap, no duplicate
            assert view.tentative(p) == [] and view.views[p].gaps == 0
            mine = [e for e in events if e.partition == p]
            # r1 is stable: r0's tentative tuples are void (the undo names the replica they came from).
            assert [(e.kind, e.id, e.replica) for e in mine if e.kind == "undo"] == [("undo", k - 1, 0)]
            assert [e.replica for e in mine if e.kind == "stable"] == [0] * k + [1] * (n - k)
        assert sorted((p, old, new) for p, old, new, _ in view.switches) == [(0, 0, 1), (1, 0, 1)]
        assert all(off == k for *_, off in view.switches)  # right after stable k-1 in r1's log
    finally:
        view.close()
        monitor.close()
        beats.close()


def test_view_applies_undo_and_rec_done_and_stable_only(kafka, spec) -> None:
    _, out = names(spec)
    producer = BatchProducer(kafka.bootstrap, linger_ms=0)
    msgs = (
        [(S, i, rec(0, i)) for i in range(5)]
        + [(T, 5, rec(0, 5, True)), (T, 6, rec(0, 6, True)), (U, 4, None)]
        + [(S, i, rec(0, i)) for i in range(5, 10)]
        + [(R, 9, None), (S, 8, rec(0, 8))]
    )
    write(producer, spec.topic(out, 0), 0, msgs, 0)
    beats = Beats(spec, kafka.bootstrap)
    beats.stop(1)  # r1 never beats: r0 is the only choice
    try:
        with StreamView(spec, out, kafka.bootstrap) as view:
            events = view.read_until(lambda v: v.views[0].rec_done is not None, timeout=10)
            assert [(e.kind, e.id) for e in events] == (
                [("stable", i) for i in range(5)]
                + [("tentative", 5), ("tentative", 6), ("undo", 4)]
                + [("stable", i) for i in range(5, 10)]
                + [("rec_done", 9)]
            )
            assert view.stable(0) == [rec(0, i) for i in range(10)] and view.tentative(0) == []
            view.poll(0.3)
            assert view.views[0].duplicates == 1 and view.current == [0, 0]
        with StreamView(spec, out, kafka.bootstrap, stable_only=True) as view:
            events = view.read_until(lambda v: len(v.stable(0)) == 10, timeout=10)
            assert [(e.kind, e.id) for e in events] == [("stable", i) for i in range(10)]
    finally:
        beats.close()


# -- faults ---------------------------------------------------------------------


def test_fault_kill_pause_resume_restart_on_a_deployment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HASTREAM_HOME", str(tmp_path))
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    dep = Deployment("fdemo", str(tmp_path / "x.yaml"), "127.0.0.1:1")
    (dep.dir / "logs").mkdir(parents=True)
    from services.deploy.processes import spawn

    log = dep.dir / "logs" / "n.r0.p0.log"
    dep.processes = [Process("n.r0.p0", spawn(argv, log, dict(os.environ)).pid, str(log), argv)]
    dep.save()
    try:
        with pytest.raises(FaultError, match=r"no process 'n.r9.p0' in deployment 'fdemo' \(roles: n.r0.p0\)"):
            faults.kill("fdemo", "n.r9.p0")
        p = faults.pause(None, "n.r0.p0")  # None: the only deployment
        assert wait_for(lambda: proc_state(p.pid) == "T"), proc_state(p.pid)  # stopped
        faults.resume("fdemo", "n.r0.p0")
        faults.kill("fdemo", "n.r0.p0")
        assert not dep.alive(p)
        with pytest.raises(FaultError, match="is not running"):
            faults.pause("fdemo", "n.r0.p0")
        env = {**os.environ, "HASTREAM_HOME": str(tmp_path)}
        r = hastream("fault", "restart", "n.r0.p0", env=env)
        assert r.returncode == 0, r.stderr
        new = Deployment.load("fdemo").processes[0]
        assert new.pid != p.pid and pid_alive_(new.pid)
        r = hastream("fault", "kill", "nope", "--deployment", "fdemo", env=env)
        assert r.returncode == 2 and "roles: n.r0.p0" in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        r = hastream("fault", "stop-source", "src", env=env)
        assert r.returncode == 2 and "no running producer of stream 'src'" in r.stderr
        r = hastream("fault", "kill", "n.r0.p0", env=env)
        assert r.returncode == 0 and not pid_alive_(new.pid)
    finally:
        for p in Deployment.load("fdemo").processes:
            if pid_alive_(p.pid):
                os.kill(p.pid, signal.SIGKILL)


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0]


def wait_for(cond, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def pid_alive_(pid: int) -> bool:
    from services.deploy.processes import pid_alive

    return pid_alive(pid)


def test_stop_source_holds_a_live_producer_and_its_tuples_arrive_late(kafka, spec, tmp_path: Path) -> None:
    src, _ = names(spec)
    home = tmp_path / "home"
    env = {**os.environ, "HASTREAM_HOME": str(home)}
    env.pop("HASTREAM_BOOTSTRAP", None)
    # A deployment record (no services) under the producer's HASTREAM_HOME: where it registers.
    d = home / "deployments" / spec.name
    d.mkdir(parents=True)
    (d / "deployment.json").write_text(
        json.dumps(
            {
                "name": spec.name,
                "spec_path": str(spec.path),
                "bootstrap": kafka.bootstrap,
                "kafka_dir": None,
                "processes": [],
            }
        )
    )
    prod = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "produce", str(spec.path), src, "--count", "0", "--rate", "200"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert prod.stderr is not None
        pidfile = d / "sources" / f"{src}.json"
        deadline = time.monotonic() + 20
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pidfile.exists(), prod.stderr.read() if prod.poll() is not None else "no pid file"
        assert json.loads(pidfile.read_text())["pid"] == prod.pid
        time.sleep(0.7)
        r = hastream("fault", "stop-source", src, "--for", "1.2", "--wait", env=env)
        assert r.returncode == 0, r.stderr
        assert "resumed source" in r.stdout
        time.sleep(0.5)
        prod.send_signal(signal.SIGTERM)
        stdout, stderr = prod.communicate(timeout=20)
        assert prod.returncode == 0, stderr
        sent = int(stdout.split("produced ")[1].split()[0])
    finally:
        if prod.poll() is None:
            prod.kill()
    assert not pidfile.exists()  # unregistered at exit
    msgs = raw(kafka.bootstrap, spec.topic(src), 2, sent)
    data = [m for m in msgs if m.value() is not None]
    assert len(data) == sent  # every tuple exactly once
    lags = []
    for p in (0, 1):
        mine = sorted((m for m in data if m.partition() == p), key=lambda m: m.offset())
        assert [parse_headers(m.headers()).id for m in mine] == list(range(len(mine)))  # in order, dense
        seqs = [READING.decode(m.value())["seq"] for m in mine]
        assert seqs == sorted(seqs)
        lags += [m.timestamp()[1] - READING.decode(m.value())["ts"] for m in mine]
    assert max(lags) > 800  # held tuples reached Kafka about 1.2 s after they were made
    bounds = [m for m in msgs if parse_headers(m.headers()).type is TupleType.BOUNDARY]
    assert {m.partition() for m in bounds} == {0, 1} and len(bounds) >= 2 * 10


def test_a_message_the_broker_refuses_fails_the_producers_flush(kafka) -> None:
    """Only failures come back from the broker (no callback per message): one still fails the flush."""
    from confluent_kafka import KafkaException

    topic = f"refuses-{os.getpid()}-{time.monotonic_ns()}"
    ensure_topics(kafka.bootstrap, [TopicSpec(topic, 1, 1, {"max.message.bytes": "2000"})])
    p = BatchProducer(kafka.bootstrap)
    p.send(topic, b"small", partition=0)
    p.flush()
    p.send(topic, os.urandom(20_000), partition=0)  # random: compression cannot bring it under the limit
    with pytest.raises(KafkaException, match="delivery failed"):
        p.flush()
