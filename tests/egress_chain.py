"""The replicated DPC chain (``tests/dpc_chain.py``) with a replicated egress on its sink, the faults
an egress adds to a schedule (kill -9, SIGSTOP past its detection, both replicas, its secondary), and
the check every such run makes: a plain read_committed consumer, in Python and the Kafka
distribution's Java console consumer, reads the failure-free stable output of the sink, in order,
each result once."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import replace
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from bench.harness import ServiceProcesses, wait_primary
from bench.workload import PacedSources
from infra.kafka.tools import console_consume
from services.control.monitor import ReplicaMonitor
from services.core.kafka import READ_COMMITTED, plain_consumer
from services.egress.latest import KIND_HEADER, identity_for
from services.egress.records import STIME_HEADER, record_id
from services.spec.egress import egress_node
from tests.dpc_chain import DEFAULT, Run, Schedule, random_schedule

EGRESS = replace(DEFAULT, egress=("stable",))  # the chain with a stable egress (2 replicas) on its sink


def egress_name(spec: Any, mode: str = "stable") -> str:
    return egress_node(next(s for s in spec.streams if s.startswith("stats_")), mode)


class EgressFault:
    """A fault on the egress replica that is primary (or secondary) when it strikes, undone ``seconds`` later:
    ``kill`` (kill -9, then started again), ``pause`` (SIGSTOP past the detection time, then SIGCONT: it
    wakes up replaced and steps down, or goes on as primary if no one replaced it: the coordinator down
    too), ``both`` (both replicas killed, then started)."""

    def __init__(self, kind: str, seconds: float, secondary: bool = False, mode: str = "stable") -> None:
        self.kind, self.seconds, self.secondary, self.mode = kind, seconds, secondary, mode
        self.roles: list[str] = []

    def __call__(self, services: ServiceProcesses, _: PacedSources) -> None:
        name = egress_name(services.spec, self.mode)
        if self.kind == "both":
            self.roles = [f"{name}.r{r}.p0" for r in (0, 1)]
        else:
            primary = self._primary(services, name)
            self.roles = [f"{name}.r{1 - primary if self.secondary else primary}.p0"]
        for role in self.roles:
            services.pause(role) if self.kind == "pause" else services.kill(role)

    @staticmethod
    def _primary(services: ServiceProcesses, name: str) -> int:
        """The replica that says it is primary; with none (the coordinator down after an earlier fault
        took the primary), replica 0, as the schedule must go on."""
        mon = ReplicaMonitor(services.bootstrap, services.spec.heartbeat_topic, 1.0)
        try:
            return wait_primary(mon, name, None, 3)
        except TimeoutError:
            return 0
        finally:
            mon.close()

    def undo(self, services: ServiceProcesses, _: PacedSources) -> None:
        for role in self.roles:
            if self.kind == "pause":
                services.resume(role)
            else:
                services.start(role)

    def __repr__(self) -> str:
        return f"egress {self.kind}{' secondary' if self.secondary else ''} for {self.seconds}"


def add_egress_fault(sched: Schedule, rng: random.Random) -> Schedule:
    """One egress fault at a random time, of a random kind."""
    kind, secondary = rng.choice([("kill", False), ("pause", False), ("kill", True), ("both", False)])
    at, seconds = round(rng.uniform(1.0, 7.0), 1), round(rng.uniform(1.0, 3.0), 1)
    fault = EgressFault(kind, seconds, secondary)
    sched += [(at, fault), (at + seconds, fault.undo)]
    sched.kinds.append(f"{fault!r} at {at}")
    return sched


def egress_schedule(seed: int) -> Schedule:
    """A random schedule of the chain's faults (``random_schedule``) and one egress fault."""
    return add_egress_fault(random_schedule(seed), random.Random(seed * 7919 + 1))


def check_egress(run: Run, failure_free: Run, bootstrap: str, timeout: float = 60) -> None:
    """The egress topic read as any consumer reads it: the failure-free stable output of the sink, per
    partition, in order, once, keyed by the result's key; the Java console consumer reads the same."""
    topic = f"{run.spec.name}.{run.stream('stats')}.stable"
    parts = list(run.partitions())
    want = {p: [v for _, v in failure_free.final("stats", 0, p)] for p in parts}
    got = _read_committed(bootstrap, topic, parts, sum(map(len, want.values())), timeout)
    for p in parts:
        values = [json.loads(v) for _, v, _ in got[p]]
        assert len(values) == len(want[p]), f"p{p}: {len(values)} records on {topic}, failure-free {len(want[p])}"
        assert values == want[p], f"p{p}: the egress topic differs from the failure-free output"
        assert [record_id(h) for _, _, h in got[p]] == list(range(len(want[p]))), f"p{p}: ids skipped or repeated"
        assert [k for k, _, _ in got[p]] == [w["key"].encode() for w in want[p]], f"p{p}: keys differ"
    java = console_consume(bootstrap, topic, sum(map(len, want.values())) + 1, timeout_s=10)
    assert sorted(json.dumps(json.loads(v), sort_keys=True) for _, v in java) == sorted(
        json.dumps(w, sort_keys=True) for p in parts for w in want[p]
    ), "the Java console consumer reads other records"


def _read_committed(
    bootstrap: str, topic: str, parts: list[int], expect: int, timeout: float
) -> dict[int, list[tuple[Any, ...]]]:
    """(key, value, headers) per partition, until ``expect`` records and two quiet seconds more."""
    c = plain_consumer(bootstrap, "egress-chain", unique=True, **READ_COMMITTED)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    got: dict[int, list[tuple[Any, ...]]] = {p: [] for p in parts}
    deadline, quiet = time.monotonic() + timeout, time.monotonic() + 2
    try:
        while time.monotonic() < deadline:
            msgs = [m for m in c.consume(500, 0.2) if m.error() is None]
            for m in msgs:
                got[m.partition() or 0].append((m.key(), m.value(), dict(m.headers() or [])))
            if msgs:
                quiet = time.monotonic() + 2
            if sum(map(len, got.values())) >= expect and time.monotonic() > quiet:
                break
    finally:
        c.close()
    return got


class LatestWatcher:
    """A fault at time 0 that follows the chain's latest egress topic as a consumer that materializes it
    does, from its start: every record with its arrival time, and the table it makes (identity -> newest
    value; a tombstone deletes)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.records: list[tuple[float, bytes, str, int, dict | None]] = []  # (at, identity, kind, stime, value)
        self.table: dict[bytes, dict] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, services: ServiceProcesses, _: PacedSources) -> None:
        topic = f"{services.spec.name}.{next(s for s in services.spec.streams if s.startswith('stats_'))}.latest"
        c = plain_consumer(self.bootstrap, "latest-watcher", unique=True, **READ_COMMITTED)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

        def run() -> None:
            try:
                while not self._stop.is_set():
                    for m in c.consume(500, 0.1):
                        if m.error() is None:
                            self._take(m.key() or b"", m.value(), dict(m.headers() or []))
            finally:
                c.close()

        self._thread = threading.Thread(target=run, name="latest-watcher", daemon=True)
        self._thread.start()

    def _take(self, key: bytes, value: bytes | None, headers: dict) -> None:
        rec = json.loads(value) if value is not None else None
        kind = (headers.get(KIND_HEADER) or b"stable").decode()
        self.records.append((time.monotonic(), key, kind, int(headers.get(STIME_HEADER, b"-1")), rec))
        if rec is None:
            self.table.pop(key, None)
        else:
            self.table[key] = rec

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def failure_free_table(run: Run, failure_free: Run) -> dict[bytes, dict]:
    """What materializing the latest topic must give: each failure-free stable result by its identity."""
    identity = identity_for(run.spec, run.stream("stats"))
    return {identity(tid, rec): rec for tid, rec in failure_free.final("stats", 0, 0) if rec is not None}


def latest_delay(run: Run, watcher: LatestWatcher) -> float:
    """Longest wait, over every result, from its last input being generated to its first version
    (tentative or stable) on the latest topic (``tests.dpc_chain.max_delay_new`` on the egress)."""
    first: dict[bytes, tuple[float, int]] = {}
    for at, key, _, stime, rec in watcher.records:
        if rec is not None and key not in first:
            first[key] = (at, stime)
    sent, step = run.sources.sent_at, run.shape.step_ms
    return max((at - sent[end - step] for at, end in first.values() if end - step in sent), default=0.0)
