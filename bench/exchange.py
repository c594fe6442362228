"""What the exchange costs, and what partition tasks and early release give, through a real broker.

    python -m bench.exchange [--tuples N] [--repeat R] [--rate R] [--seconds S] [--quick] [--bootstrap B]

Every node runs as the launcher runs it, one process per node partition (``bench.harness.ServiceProcesses``),
one replica, DPC; every topic stamps LogAppendTime, so times below are the broker's append times.

* **Exchange, pre-loaded input** (``--tuples`` located readings in 2 partitions): a filter node (2
  partitions) feeds a sliding window keyed by building (2 partitions). *direct*: the readings are
  written keyed by building, so the window reads its input as it is split; *exchange*: they are
  written keyed by sensor, so the filter's output crosses an exchange (4 connections). Same records,
  same windows. Throughput: input tuples / (append of the last window result - append of the first
  input). CPU per tuple: the node processes' CPU from the moment they all ran until the last result,
  per input tuple. Both outputs equal the reference evaluation, partition by partition, before any figure.
* **Latency per hop** (``--rate`` tuples/s for ``--seconds``): the filter node (2 partitions) feeds a
  second filter of 2 partitions (*direct*, one input in log order) or 3 (*exchange*: 2 connections
  merged by tuple time). Per tuple: append of the second filter's output minus append of the first's
  (same ``seq``); the first second is warm-up.
* **Union**: three sources into a one-partition union node, beside one source into a filter node; per
  tuple, append of the output minus append of its input. Its merge releases what every input's
  boundary has passed (``SUnion(early=True)``), not whole buckets.
* **Partition tasks**: a window node of 4 partitions in 1 and in 2 processes (``processes:``), throughput
  as above.

Goals (issue 36): the exchange adds <= 3 us CPU per tuple, <= 3 ms p50 and <= 10 ms p99 per hop; the
union node's p50 <= 10 ms at 1,000 tuples/s; 2 processes >= 1.7x 1 process for 4 partitions.
Results: ``bench/results/exchange.json`` and ``docs/exchange.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from rich.table import Table

from bench.borealis.common import machine
from bench.harness import ServiceProcesses, cpu_s
from bench.stats import pct
from bench.throughput.jobs import TOPIC_CONFIG
from bench.throughput.run import bench_broker, console, out
from bench.workload import PacedSources
from services.client.source import END_OF_TIME, SourceWriter
from services.client.workload import located, readings
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.core.admin import delete_topics, ensure_topics
from services.core.codec import codec_for
from services.core.partitioner import key_bytes, partition_for
from services.core.paths import REPO_ROOT
from services.core.tuples import TupleType, read_headers
from services.deploy.topics import topic_specs
from services.log.tail import range_consumer, read_range
from services.operators.reference import evaluate
from services.spec import Spec, parse_spec
from services.spec.topics import all_topics

RESULTS = REPO_ROOT / "bench" / "results" / "exchange.json"
PLOT = REPO_ROOT / "docs" / "exchange.png"
WINDOW = "{type: window, input: warm, output: stats, key: KEY, size: 1000, slide: 500, aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}"


def window_text(name: str, source_key: str, window_key: str) -> str:
    """A filter node and a window node of 2 partitions each."""
    return f"""\
name: {name}
streams:
  readings: {{schema: located, key: {source_key}, partitions: 2}}
  warm: {{schema: located, key: {source_key}, partitions: 2}}
  stats: {{schema: window_stat, key: key, partitions: 2}}
operators:
  keep: {{type: filter, input: readings, output: warm, where: "value > -1000"}}
  win: {WINDOW.replace("KEY", window_key)}
nodes:
  pre: {{operators: [keep]}}
  win: {{operators: [win]}}
"""


def tasks_text(name: str, processes: int) -> str:
    """A window node of 4 partitions in ``processes`` processes, reading the source itself."""
    win = WINDOW.replace("KEY", "sensor").replace("input: warm", "input: readings")
    return f"""\
name: {name}
streams:
  readings: {{schema: located, key: sensor, partitions: 4}}
  stats: {{schema: window_stat, key: key, partitions: 4}}
operators:
  win: {win}
nodes:
  win: {{operators: [win], processes: {processes}}}
"""


def hop_text(name: str, second: int) -> str:
    return f"""\
name: {name}
streams:
  readings: {{schema: located, key: sensor, partitions: 2}}
  warm: {{schema: located, key: sensor, partitions: 2}}
  out: {{schema: located, key: sensor, partitions: {second}}}
operators:
  keep: {{type: filter, input: readings, output: warm, where: "value > -1000"}}
  again: {{type: filter, input: warm, output: out, where: "value > -1000"}}
nodes:
  pre: {{operators: [keep]}}
  post: {{operators: [again]}}
"""


def union_text(name: str, sources: int) -> str:
    srcs = [f"s{i}" for i in range(sources)]
    streams = "".join(f"  {s}: {{schema: reading, key: sensor}}\n" for s in srcs)
    op = (
        f"{{type: union, inputs: [{', '.join(srcs)}], output: out}}"
        if sources > 1
        else '{type: filter, input: s0, output: out, where: "value > -1000"}'
    )
    return f"name: {name}\nstreams:\n{streams}  out: {{schema: reading, key: sensor}}\noperators:\n  op: {op}\nnodes:\n  n: {{operators: [op]}}\n"


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
        self.cpu0 = {r: cpu_s(p.pid) for r, p in self.procs.procs.items()}

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
        return sum(cpu_s(p.pid) - self.cpu0[r] for r, p in self.procs.procs.items())

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


def throughput_run(bootstrap: str, scratch: Path, text: str, n: int) -> dict[str, Any]:
    """Pre-loaded input through a deployed spec: throughput, CPU per tuple, and whether it equals the reference."""
    dep = Deployed(bootstrap, text, scratch)
    try:
        key = dep.spec.streams["readings"].key or "sensor"
        recs = list(located(n, step_ms=2, seed=5))
        inputs = preload(dep.spec, bootstrap, "readings", recs)
        want = evaluate(dep.spec, {"readings": inputs}, ended=True)["stats"]
        got = wait_output(dep, "stats", [len(w) for w in want])
        cpu = dep.cpu()
        first_in = min(read_data(bootstrap, dep.spec.topic("readings"), p, "located")[0][0] for p in range(len(inputs)))
        last_out = max(g[-1][0] for g in got if g)
        equal = all([r for _, r in g] == w for g, w in zip(got, want, strict=True))
        return {
            "tuples_per_s": n / max(1e-3, (last_out - first_in) / 1000),
            "cpu_us": cpu / n * 1e6,
            "equal": equal,
            "key": key,
        }
    finally:
        dep.close()


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.exchange", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tuples", type=int, default=60_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--quick", action="store_true", help="10,000 tuples, 1 repeat, 8 s paced")
    ap.add_argument("--bootstrap")
    a = ap.parse_args(argv)
    if a.quick:
        a.tuples, a.repeat, a.seconds = 10_000, 1, 8
    with bench_broker(a.bootstrap, "hastream-exchange-") as (bootstrap, scratch):
        res = run(bootstrap, scratch, a)
    res["machine"] = machine({"kafka": None})
    res["when"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    RESULTS.write_text(json.dumps(res, indent=2) + "\n")
    show(res)
    plot(res)


def run(bootstrap: str, scratch: Path, a: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    res: dict[str, Any] = {"tuples": a.tuples, "repeat": a.repeat, "rate": a.rate, "seconds": a.seconds}
    runs: dict[str, list[dict[str, Any]]] = {"direct": [], "exchange": [], "1 process": [], "2 processes": []}
    texts = {
        "direct": lambda i: window_text(f"xd{tag}{i}", "building", "building"),
        "exchange": lambda i: window_text(f"xe{tag}{i}", "sensor", "building"),
        "1 process": lambda i: tasks_text(f"x1{tag}{i}", 1),
        "2 processes": lambda i: tasks_text(f"x2{tag}{i}", 2),
    }
    for i in range(a.repeat):  # alternating, so a slow spell of the machine hits each alike
        for name, make in texts.items():
            console.print(f"[dim]{name}, run {i + 1} of {a.repeat}[/]")
            runs[name].append(throughput_run(bootstrap, scratch, make(i), a.tuples))
    bad = [k for k, rs in runs.items() if not all(r["equal"] for r in rs)]
    if bad:
        raise SystemExit(f"outputs differ from the reference evaluation: {bad}; no figures")
    res["throughput"] = {k: _median(rs) for k, rs in runs.items()}
    lat = {}
    for name, second in (("direct hop", 2), ("exchange hop", 3)):
        console.print(f"[dim]{name} at {a.rate}/s[/]")
        text = hop_text(f"xh{second}{tag}", second)
        lat[name] = summary(hop_latencies(bootstrap, scratch, text, a.rate, a.seconds, ["warm"], "out"))
    for name, n in (("one-input node", 1), ("three-source union", 3)):
        console.print(f"[dim]{name} at {a.rate}/s[/]")
        text, srcs = union_text(f"xu{n}{tag}", n), [f"s{i}" for i in range(n)]
        lat[name] = summary(hop_latencies(bootstrap, scratch, text, a.rate, a.seconds, srcs, "out"))
    res["latency"] = lat
    t = res["throughput"]
    res["figures"] = {
        "exchange_cpu_us_added": t["exchange"]["cpu_us"] - t["direct"]["cpu_us"],
        "exchange_throughput_ratio": t["exchange"]["tuples_per_s"] / t["direct"]["tuples_per_s"],
        "hop_p50_ms_added": lat["exchange hop"]["p50_ms"] - lat["direct hop"]["p50_ms"],
        "hop_p99_ms_added": lat["exchange hop"]["p99_ms"] - lat["direct hop"]["p99_ms"],
        "processes_ratio": t["2 processes"]["tuples_per_s"] / t["1 process"]["tuples_per_s"],
        "union_p50_ms": lat["three-source union"]["p50_ms"],
    }
    return res


def _median(rs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tuples_per_s": statistics.median(r["tuples_per_s"] for r in rs),
        "runs_tuples_per_s": [round(r["tuples_per_s"]) for r in rs],
        "cpu_us": statistics.median(r["cpu_us"] for r in rs),
        "runs_cpu_us": [round(r["cpu_us"], 1) for r in rs],
    }


def show(res: dict[str, Any]) -> None:
    t = Table(title=f"throughput, {res['tuples']:,} readings, median of {res['repeat']}")
    for c in ("run", "tuples/s", "runs", "CPU us/tuple", "runs"):
        t.add_column(c)
    for k, v in res["throughput"].items():
        t.add_row(
            k, f"{v['tuples_per_s']:,.0f}", str(v["runs_tuples_per_s"]), f"{v['cpu_us']:.1f}", str(v["runs_cpu_us"])
        )
    out.print(t)
    lt = Table(title=f"latency at {res['rate']}/s")
    for c in ("path", "p50 ms", "p99 ms", "tuples"):
        lt.add_column(c)
    for k, v in res["latency"].items():
        lt.add_row(k, f"{v['p50_ms']:.1f}", f"{v['p99_ms']:.1f}", str(v["n"]))
    out.print(lt)
    out.print(json.dumps({k: round(v, 2) for k, v in res["figures"].items()}))


def plot(res: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    t = res["throughput"]
    a1.bar(list(t), [v["tuples_per_s"] for v in t.values()], color=["#4c72b0", "#dd8452", "#55a868", "#c44e52"])
    a1.set_ylabel("input tuples/s")
    a1.set_title("window: direct vs across an exchange; 4 partitions in 1 or 2 processes", fontsize=9)
    lat = res["latency"]
    xs = range(len(lat))
    a2.bar([x - 0.2 for x in xs], [v["p50_ms"] for v in lat.values()], 0.4, label="p50")
    a2.bar([x + 0.2 for x in xs], [v["p99_ms"] for v in lat.values()], 0.4, label="p99")
    a2.set_xticks(list(xs), list(lat), fontsize=8)
    a2.set_ylabel("ms")
    a2.set_title(f"latency at {res['rate']} tuples/s", fontsize=9)
    a2.legend()
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


if __name__ == "__main__":
    main()
