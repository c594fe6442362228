"""One deployment of a spec and what the exchange bench measures on it: throughput, latency, Quix."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import TopicPartition

from bench.exchange.specs import window_text
from bench.harness import ServiceProcesses, cpu_s
from bench.stats import pct
from bench.throughput.jobs import TOPIC_CONFIG, Job
from bench.throughput.worker import Worker
from bench.workload import PacedSources
from services.client.source import END_OF_TIME, SourceWriter
from services.client.workload import located, readings
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.core.admin import TopicSpec, delete_topics, ensure_topics
from services.core.codec import codec_for
from services.core.partitioner import key_bytes, partition_for
from services.core.tuples import TupleType, read_headers
from services.deploy import processes
from services.deploy.topics import topic_specs
from services.log.tail import range_consumer, read_range
from services.operators.reference import evaluate
from services.spec import Spec, parse_spec
from services.spec.topics import all_topics

IDLE_S = 2.0  # how long the idle processes' CPU is sampled


class Deployed:
    """A spec's topics (LogAppendTime) and node processes on the broker, until ``close``."""

    def __init__(self, bootstrap: str, text: str, scratch: Path) -> None:
        self.bootstrap = bootstrap
        self.spec = parse_spec(text, source="<bench exchange>")
        path = scratch / f"{self.spec.name}.yaml"
        path.write_text(text)
        ensure_topics(bootstrap, topic_specs(self.spec, 1, TOPIC_CONFIG))
        self.procs = ServiceProcesses(self.spec, path, bootstrap, scratch / "logs" / self.spec.name, coordinator=False)
        self.procs.start()
        self._wait_stable()
        self.cpu0 = self._cpus()
        time.sleep(IDLE_S)  # what the processes spend idle (heartbeats, polls), taken out of the figures
        self.idle_per_s = (sum(self._cpus().values()) - sum(self.cpu0.values())) / IDLE_S
        self.started = time.monotonic()
        self.cpu0 = self._cpus()

    def _cpus(self) -> dict[str, float]:
        return {r: cpu_s(p.pid) for r, p in self.procs.procs.items()}

    def hold(self, on: bool) -> None:
        """Stop every node process (SIGSTOP) or let them go on, all at once; going on restarts the CPU count."""
        for p in self.procs.procs.values():
            (processes.pause if on else processes.resume)(p)
        if not on:
            self.started, self.cpu0 = time.monotonic(), self._cpus()

    def _wait_stable(self, limit_s: float = 90) -> None:
        mon = ReplicaMonitor(self.bootstrap, self.spec.heartbeat_topic, 5.0)
        units = [(n, p) for n in self.spec.nodes for p in range(self.spec.node_partitions(n))]
        try:
            deadline = time.monotonic() + limit_s
            while not all(mon.state(n, p, 0) is NodeState.STABLE for n, p in units):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.spec.name}: node partitions not STABLE in {limit_s:.0f} s")
                time.sleep(0.2)
        finally:
            mon.close()

    def cpu(self) -> float:
        """CPU seconds of the node processes since they started or went on, less what they spend idle."""
        busy = sum(cpu_s(p.pid) - self.cpu0[r] for r, p in self.procs.procs.items())
        return busy - self.idle_per_s * (time.monotonic() - self.started)

    def close(self) -> None:
        self.procs.stop()
        delete_topics(self.bootstrap, [t for t, _ in all_topics(self.spec)])


def read_data(bootstrap: str, topic: str, partition: int, schema: str) -> list[tuple[int, dict]]:
    """(append time ms, record) of every data tuple of one partition, in log order."""
    decode = codec_for(schema).decode
    c = range_consumer(bootstrap, "bench.exchange")
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        got = []
        for m in read_range(c, topic, partition, low, high):
            t, *_ = read_headers(m.headers())
            if t in (TupleType.STABLE, TupleType.TENTATIVE):
                got.append((m.timestamp()[1], decode(m.value())))
        return got
    finally:
        c.close()


def preload(spec: Spec, bootstrap: str, stream: str, records: list[dict]) -> list[list[dict]]:
    """Write ``records`` and the final boundary; returns them per partition as the writer split them."""
    sd = spec.streams[stream]
    parts: list[list[dict]] = [[] for _ in range(sd.partitions)]
    w = SourceWriter(spec, stream, bootstrap)
    for r in records:
        w.send(r)
        parts[partition_for(key_bytes(r[sd.key or "sensor"]), sd.partitions)].append(r)
    w.boundary(END_OF_TIME)
    w.flush()
    return parts


def wait_output(dep: Deployed, stream: str, want: list[int], limit_s: float = 600) -> list[list[tuple[int, dict]]]:
    """Each partition of ``stream`` once it holds ``want[p]`` data tuples."""
    topic, schema = dep.spec.topic(stream), dep.spec.streams[stream].schema
    deadline = time.monotonic() + limit_s
    while True:
        got = [read_data(dep.bootstrap, topic, p, schema) for p in range(len(want))]
        if all(len(g) >= w for g, w in zip(got, want, strict=True)):
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{stream}: {[len(g) for g in got]} of {want} results")
        time.sleep(1.0)


def throughput_run(
    bootstrap: str,
    scratch: Path,
    text: str,
    n: int,
    sensors: int = 24,
    before_close: Callable[[Deployed], None] | None = None,
) -> dict[str, Any]:
    """Pre-loaded input (``n`` readings of ``sensors`` sensors) through a deployed spec: throughput, CPU per
    tuple, and whether it equals the reference; ``before_close`` may look at the deployment last."""
    dep = Deployed(bootstrap, text, scratch)
    try:
        key = dep.spec.streams["readings"].key or "sensor"
        recs = list(located(n, sensors=sensors, step_ms=2, seed=5))
        dep.hold(True)  # the nodes run at their own pace, not the writer's, and share no core with it
        inputs = preload(dep.spec, bootstrap, "readings", recs)
        want = evaluate(dep.spec, {"readings": inputs}, ended=True)["stats"]
        went_on_ms = time.time() * 1000  # the broker's LogAppendTime is this machine's clock
        dep.hold(False)
        got = wait_output(dep, "stats", [len(w) for w in want])
        cpu = dep.cpu()
        last_out = max(g[-1][0] for g in got if g)
        equal = all([r for _, r in g] == w for g, w in zip(got, want, strict=True))
        if before_close is not None:
            before_close(dep)
        return {
            "tuples_per_s": n / max(1e-3, (last_out - went_on_ms) / 1000),
            "cpu_us": cpu / n * 1e6,
            "equal": equal,
            "key": key,
        }
    finally:
        dep.close()


def quix_run(bootstrap: str, scratch: Path, name: str, source_key: str, group_by: str, n: int) -> dict[str, Any]:
    """The same window as a Quix Streams application: on readings keyed by ``source_key``, re-keyed by
    ``group_by`` first (its repartition topic) or windowed by the message key; its closed windows must
    be the reference's (it leaves the last ones open, having no end of input)."""
    spec = parse_spec(window_text(name, source_key, "building"), source="<bench quix>")
    ensure_topics(bootstrap, topic_specs(spec, 1, TOPIC_CONFIG))
    out_topic = f"{name}.quix_out"
    ensure_topics(bootstrap, [TopicSpec(out_topic, 2, 1, dict(TOPIC_CONFIG))])
    try:
        inputs = preload(spec, bootstrap, "readings", list(located(n, step_ms=2, seed=5)))
        job = Job("quix", bootstrap, spec.topic("readings"), out_topic, f"bench.{name}", n + 2, 30.0)
        job.window, job.schema, job.group_by, job.finals = True, "located", group_by, 2
        job.state_dir = str(scratch / f"{name}.state")
        w = Worker(job, scratch)
        res = w.wait(600)
        got = {_row(r) for p in range(2) for _, r in _plain(bootstrap, out_topic, p)}
        want = evaluate(spec, {"readings": inputs}, ended=True)["stats"]
        last = max(r["ts"] for part in inputs for r in part)
        every = {_row(r) for part in want for r in part}
        # every window it closed is the reference's; the ones it left open reach past the input's end
        closed = {_row(r) for part in want for r in part if r["window_end"] <= last}
        wrong = len(got - every) / max(1, len(got))
        # Re-keyed, its repartition topic interleaves the input partitions out of time order, and its
        # windows drop what comes after their stream time passed: reported, not required equal.
        equal = bool(group_by) or (got <= every and closed <= got)
        span = max(1e-3, res["last_at"] - res["first_at"])
        return {"tuples_per_s": n / span, "cpu_us": res["cpu_s"] / n * 1e6, "equal": equal, "wrong": wrong}
    finally:
        delete_topics(bootstrap, [t for t, _ in all_topics(spec)] + [out_topic])


def _row(r: dict) -> tuple:
    return tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in r.items()))


def _plain(bootstrap: str, topic: str, partition: int) -> list[tuple[int, dict]]:
    """(append time, record) of every message of one partition of a plain Avro topic (a peer's output)."""
    decode = codec_for("window_stat").decode
    c = range_consumer(bootstrap, "bench.exchange")
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return [(m.timestamp()[1], decode(m.value())) for m in read_range(c, topic, partition, low, high)]
    finally:
        c.close()


def hop_latencies(
    bootstrap: str, scratch: Path, text: str, rate: int, seconds: float, first: list[str], second: str
) -> list[float]:
    """Paced input; per tuple, the append of ``second``'s output minus that of its ``first`` stream's
    (ms, by ``seq``, which the sources number apart)."""
    dep = Deployed(bootstrap, text, scratch)
    try:
        names = list(dep.spec.sources())
        n = int(rate * seconds)
        work = {
            s: [{**r, "seq": r["seq"] * len(names) + i} for r in _records(dep.spec, s, n)] for i, s in enumerate(names)
        }
        src = PacedSources(dep.spec, bootstrap, work, rate / len(names)).start()
        src.join(seconds + 60)
        total = sum(len(w) for w in work.values())
        outs = _stamped(dep, second, total)
        ins = {k: v for f in first for k, v in _stamped(dep, f, total // len(first)).items()}
        warm = min(ins.values()) + 1000
        return sorted(float(outs[s] - ins[s]) for s in outs if s in ins and ins[s] >= warm)
    finally:
        dep.close()


def _records(spec: Spec, stream: str, n: int) -> list[dict]:
    gen = located if spec.streams[stream].schema == "located" else readings
    return list(gen(n, step_ms=1))


def _stamped(dep: Deployed, stream: str, total: int) -> dict[int, int]:
    """``seq`` -> append time of every data tuple of ``stream`` (sources, outputs, or connections)."""
    spec, schema = dep.spec, dep.spec.streams[stream].schema
    topics = spec.stream_topics(stream)
    deadline = time.monotonic() + 120
    while True:
        stamped: dict[int, int] = {}
        for t in topics:
            for p in range(spec.topic_partitions(stream)):
                stamped.update((r["seq"], at) for at, r in read_data(dep.bootstrap, t, p, schema))
        if len(stamped) >= total or time.monotonic() > deadline:
            return stamped
        time.sleep(1.0)


def summary(lat: list[float]) -> dict[str, float]:
    return {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "n": len(lat)}
