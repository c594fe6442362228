"""What an egress costs: filter+map with and without the stable egress of its output, and the latency a
plain read_committed consumer of the egress topic sees, through a real broker.

    python -m bench.egress [--tuples N] [--repeat R] [--rate R] [--paced-seconds S] [--quick] [--bootstrap B]

* Throughput (pre-loaded input, ``bench.throughput``'s): the filter+map node alone (input tuples /
  seconds from its first batch to its last output, as ``bench.throughput`` measures it), and the same
  node with the egress of its output running beside it in its own process, ``hastream egress``
  (input tuples / seconds from the node's first batch to the moment a read_committed consumer of the
  egress topic has received the last result). Runs alternate, ``--repeat`` of each; medians and every
  run are reported, and their ratio.
* Latency (input written at ``--rate``): per result, when a read_committed consumer of the egress
  topic received it, minus the broker's append time of the input tuple it came from (end to end), and
  minus the append time of the node's own output of it (what the egress adds: reading the node's log,
  then up to one commit interval before the transaction that holds it becomes readable).
* A commit alone: a transactional producer on the same broker, 100 records and a commit every commit
  interval, with no egress around it; how long its commits take.
* Quix Streams, if ``make peers`` installed it: its filter+map with ``processing_guarantee``
  at-least-once and exactly-once, in the same run (Quix's docs expect exactly-once to be up to 10%
  slower, its output visible at each commit).

Goals: with egress >= 0.85x the node alone; the egress adds at most half the commit interval + 5 ms at
p50 and the commit interval + 20 ms at p99. Results: ``bench/results/egress.json``, ``docs/egress.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from rich.table import Table

from bench.borealis.common import machine
from bench.harness import cpu_s
from bench.stats import pct
from bench.throughput.check import read_topic
from bench.throughput.jobs import EOS_PEER, TOPIC_CONFIG, make_job, peers_python, topics_of
from bench.throughput.phases import WARMUP_S, Bench, live_source
from bench.throughput.run import bench_broker, console, out, progress_bars
from bench.throughput.worker import Worker
from services.client.source import SourceWriter
from services.core.admin import TopicSpec
from services.core.codec import codec_for
from services.core.kafka import READ_COMMITTED, plain_consumer
from services.core.paths import REPO_ROOT
from services.core.transactions import TransactionalProducer
from services.deploy import processes
from services.spec import parse_spec
from services.spec.egress import egress_topic

RESULTS = REPO_ROOT / "bench" / "results" / "egress.json"
PLOT = REPO_ROOT / "docs" / "egress.png"
COMMIT_MS = 100  # the egress's default commit interval
MIN_X_NODE = 0.85
NODE, WITH = "filter+map", "filter+map + egress"
EOS_BASE = "quix filter+map"  # at-least-once, beside EOS_PEER
COMMITS = 150  # transactions of a producer alone, timed


class Visible:
    """A plain read_committed consumer of a topic, from its start, noting when each record arrived."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.got: list[tuple[float, bytes, int]] = []  # (wall-clock arrival, value, the broker's append ms)
        self._c = plain_consumer(bootstrap, "bench-egress", unique=True, **READ_COMMITTED)
        self._c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="visible", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msgs = self._c.consume(1000, 0.05)
            now = time.time()
            self.got.extend((now, m.value() or b"", m.timestamp()[1]) for m in msgs if m.error() is None)

    def wait(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return len(self.got) >= n

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._c.close()


class WithEgress:
    """The filter+map node job of ``tag`` with the stable egress of its output: the spec file the egress
    process reads, its topic, and the process (started by ``start``, ready once it says it writes)."""

    def __init__(self, bench: Bench, tag: str, source: str, stop_after: int) -> None:
        self.job, plain = make_job("filter+map", tag, source, bench.bootstrap, stop_after, 30)
        assert plain is not None
        out_stream = plain.node_outputs(self.job.node)[0]
        line = f"  {out_stream}: {{schema: reading, key: sensor, partitions: 1}}"
        assert line in self.job.spec_text
        self.job.spec_text = self.job.spec_text.replace(line, line[:-1] + f", egress: {{commit_ms: {COMMIT_MS}}}}}")
        self.spec = parse_spec(self.job.spec_text, source=f"<bench {tag}>")
        self.stream, self.bench = out_stream, bench
        self.topic = egress_topic(self.spec, out_stream, self.spec.streams[out_stream].egress[0])
        self.path = bench.log_dir / f"{tag}.yaml"
        self.path.write_text(self.job.spec_text)
        bench.provision(topics_of(self.job, self.spec))
        self.log = bench.log_dir / f"{tag}.egress.log"
        self.proc: Any = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "services.cli.main", "egress", str(self.path), self.stream, "--idle", "60"]
        env = {**os.environ, "HASTREAM_BOOTSTRAP": self.bench.bootstrap}
        self.proc = processes.spawn(argv, self.log, env)
        deadline = time.monotonic() + 60
        while "writing " not in (self.log.read_text(errors="replace") if self.log.exists() else ""):
            if time.monotonic() > deadline or not processes.alive(self.proc):
                raise RuntimeError(f"the egress did not start: {self.log}")
            time.sleep(0.05)

    def cpu_s(self) -> float:
        """The egress process's CPU seconds so far."""
        return cpu_s(self.proc.pid)

    def stop(self) -> None:
        if self.proc is not None:
            processes.stop([self.proc], timeout=20)


def throughput_with_egress(bench: Bench, source: str, messages: int, i: int, progress: Any) -> dict[str, Any]:
    """The node and the egress of its output, from the pre-loaded input to the last result a consumer reads."""
    n = bench.args.tuples
    run = WithEgress(bench, f"{bench.tag}_eg{i}", source, messages)
    visible = Visible(bench.bootstrap, run.topic)
    task = progress.add_task(f"{WITH} run {i + 1}", total=n)
    try:
        run.start()
        cpu0 = run.cpu_s()  # its start-up (imports, clients, the transactional init) is not the tuples'
        w = Worker(run.job, bench.log_dir)
        res = w.wait(timeout=60 + n / 1000, on_tick=lambda: progress.update(task, completed=len(visible.got)))
        if not visible.wait(n, 120):
            raise RuntimeError(f"{WITH}: a consumer read {len(visible.got)} of {n} results")
        progress.update(task, completed=n)
        egress_cpu = run.cpu_s() - cpu0
    finally:
        run.stop()
        visible.close()
    secs = visible.got[n - 1][0] - res["first_at"]
    return {"tuples_per_s": n / secs, "seconds": secs, "cpu_s": res["cpu_s"], "egress_cpu_s": egress_cpu}


def latency_with_egress(bench: Bench, progress: Any) -> dict[str, Any]:
    """At ``--rate``: per result, a consumer's receipt of it minus its input's and its node output's append."""
    rate, secs = bench.args.rate, bench.args.paced_seconds
    total = int(rate * secs)
    tag = f"{bench.tag}_pegress"
    source = f"{tag}_in"
    run = WithEgress(bench, tag, source, 10 * total + 1000)
    writer = SourceWriter(run.spec, source, bench.bootstrap)
    visible = Visible(bench.bootstrap, run.topic)
    task = progress.add_task(f"{WITH} at {rate:,.0f}/s", total=total)
    try:
        run.start()
        w = Worker(run.job, bench.log_dir)
        w.wait_ready()
        time.sleep(0.5)
        live_source(writer, total, rate, lambda i: progress.update(task, completed=i))
        w.wait(timeout=60)
        visible.wait(total, 30)
    finally:
        run.stop()
        visible.close()
    return {**_latencies(bench, source, run.job.out_topic, visible.got), "egress_commits": egress_commits(run.log)}


# The line a stopping egress pump logs (``services.egress.pump.commit_summary``).
COMMITS_LINE = re.compile(r"(\d+) transactions committed; the newest \d+ took p50 ([\d.]+) ms, p99 ([\d.]+) ms")


def egress_commits(log_file: Path) -> dict[str, float]:
    """How long the egress's own commits took under the run's load, as it said when it stopped."""
    found = COMMITS_LINE.findall(log_file.read_text(errors="replace"))
    if not found:
        raise RuntimeError(f"the egress did not say how long its commits took: {log_file}")
    n, p50, p99 = found[-1]
    return {"commits": int(n), "p50_ms": float(p50), "p99_ms": float(p99)}


def commit_alone(bench: Bench, progress: Any) -> dict[str, float]:
    """A transactional producer alone on the same broker: 100 records, then a commit, every commit
    interval. How long a commit takes with no egress around it: the least a record waits past the
    commit it goes in."""
    topic = f"{bench.tag}_commit"
    bench.provision([TopicSpec(topic, 1, 1, dict(TOPIC_CONFIG))])
    producer = TransactionalProducer(bench.bootstrap, f"hastream.bench.{topic}")
    producer.init()
    took: list[float] = []
    task = progress.add_task("commits alone", total=COMMITS)
    for i in range(COMMITS):
        producer.begin()
        for _ in range(100):
            producer.send(topic, b"x" * 60, b"k", 0)
        time.sleep(COMMIT_MS / 1000)
        t0 = time.perf_counter()
        producer.commit()
        took.append((time.perf_counter() - t0) * 1e3)
        progress.update(task, completed=i + 1)
    producer.close()
    took.sort()
    return {"p50_ms": pct(took, 50), "p90_ms": pct(took, 90), "p99_ms": pct(took, 99)}


def _latencies(bench: Bench, source: str, node_topic: str, got: list[tuple[float, bytes, int]]) -> dict[str, Any]:
    """End-to-end and added latency per result, matched by the reading's ``seq``; the first second out. The
    added latency in two parts: until the egress's record is appended (reading the node's log, the produce),
    and from then until a consumer has it (the wait for the commit, the commit, the consumer's fetch)."""
    reading = codec_for("reading")
    ins = {
        reading.decode(m.value)["seq"]: m.append_ms for m in read_topic(bench.bootstrap, source) if m.type == "STABLE"
    }
    node = {
        reading.decode(m.value)["seq"]: m.append_ms
        for m in read_topic(bench.bootstrap, node_topic)
        if m.type == "STABLE"
    }
    start = min(ins.values()) + WARMUP_S * 1000
    e2e: list[float] = []
    added: list[float] = []
    appended: list[float] = []
    committed: list[float] = []
    for at, value, append_ms in got:
        seq = json.loads(value)["seq"]
        if seq in ins and ins[seq] >= start and seq in node:
            e2e.append(at * 1000 - ins[seq])
            added.append(at * 1000 - node[seq])
            appended.append(append_ms - node[seq])
            committed.append(at * 1000 - append_ms)
    for xs in (e2e, added, appended, committed):
        xs.sort()
    return {
        "p50_ms": pct(e2e, 50),
        "p99_ms": pct(e2e, 99),
        "added_p50_ms": pct(added, 50),
        "added_p99_ms": pct(added, 99),
        "appended_p50_ms": pct(appended, 50),
        "appended_p99_ms": pct(appended, 99),
        "committed_p50_ms": pct(committed, 50),
        "committed_p99_ms": pct(committed, 99),
        "samples": len(e2e),
        "read": len(got),
        "input": len(ins),
    }


def goals(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals against the figures of the same run."""
    lat, x = doc["latency"], doc["x_node"]
    want = [
        ("with egress × node alone", x, f">= {MIN_X_NODE}", x >= MIN_X_NODE),
        ("added p50 ms", lat["added_p50_ms"], f"<= {COMMIT_MS / 2 + 5:g}", lat["added_p50_ms"] <= COMMIT_MS / 2 + 5),
        ("added p99 ms", lat["added_p99_ms"], f"<= {COMMIT_MS + 20}", lat["added_p99_ms"] <= COMMIT_MS + 20),
    ]
    return [{"goal": g, "measured": round(v, 2), "want": w, "met": m} for g, v, w, m in want]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The benchmark: a broker (``--bootstrap``'s or our own), the runs, the table, the file and the plot."""
    with bench_broker(args.bootstrap, "hastream-bench-egress-") as (bootstrap, tmp):
        bench = Bench(args, bootstrap, tmp)
        peers = [EOS_BASE, EOS_PEER] if peers_python() is not None else []
        if not peers:
            console.print("[yellow]Quix Streams is not installed: its rows are skipped (`make peers` installs it)[/]")
        runs, latency = _measure(args, bench, peers)
        doc = _document(args, runs, latency)
        out.print(_table(doc))
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
        plot(doc, PLOT)
        out.print(f"figures written to {RESULTS.relative_to(REPO_ROOT)}, plot to {PLOT.relative_to(REPO_ROOT)}")
        return doc


def _measure(args: argparse.Namespace, bench: Bench, peers: list[str]) -> tuple[dict[str, list], dict[str, Any]]:
    """Every processor's throughput runs, alternating run by run, then the latency run."""
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in (NODE, WITH, *peers)}
    try:
        with progress_bars() as progress:
            source, messages = bench.preload(progress)
            for i in range(args.repeat):
                runs[NODE].append(bench.throughput_run(NODE, source, messages, i, progress))
                runs[WITH].append(throughput_with_egress(bench, source, messages, i, progress))
                for p in peers:
                    runs[p].append(bench.throughput_run(p, source, messages, i, progress))
            latency = latency_with_egress(bench, progress)
            latency["commit_alone"] = commit_alone(bench, progress)
    finally:
        if args.bootstrap:  # a broker of our own is stopped instead
            bench.cleanup()
    return runs, latency


def _document(args: argparse.Namespace, runs: dict[str, list], latency: dict[str, Any]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for p, rs in runs.items():
        tps = [r["tuples_per_s"] for r in rs]
        results[p] = {
            "tuples_per_s": statistics.median(tps),
            "runs_tuples_per_s": [round(t) for t in tps],
            "cpu_us_per_tuple": statistics.median(r["cpu_s"] for r in rs) * 1e6 / args.tuples,
        }
        if p == WITH:
            results[p]["egress_cpu_us_per_tuple"] = statistics.median(r["egress_cpu_s"] for r in rs) * 1e6 / args.tuples
    doc: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine({"broker": "external (--bootstrap)" if args.bootstrap else "embedded 1-broker KRaft"}),
        "config": {
            "tuples": args.tuples,
            "repeat": args.repeat,
            "rate": args.rate,
            "paced_seconds": args.paced_seconds,
            "commit_ms": COMMIT_MS,
            "warmup_s": WARMUP_S,
        },
        "results": results,
        "x_node": results[WITH]["tuples_per_s"] / results[NODE]["tuples_per_s"],
        "latency": latency,
    }
    if EOS_PEER in results:
        doc["quix_eos_x"] = results[EOS_PEER]["tuples_per_s"] / results[EOS_BASE]["tuples_per_s"]
    doc["goals"] = goals(doc)
    return doc


def _table(doc: dict[str, Any]) -> Table:
    t = Table(title="the egress: filter+map, 1 partition, 1 process each", caption_justify="left")
    for col in ("processor", "tuples/s (median)", "runs", "× node alone"):
        t.add_column(col, justify="left" if col == "processor" else "right", no_wrap=col != "runs")
    base = doc["results"][NODE]["tuples_per_s"]
    for p, r in doc["results"].items():
        t.add_row(
            p,
            f"{r['tuples_per_s']:,.0f}",
            ", ".join(f"{v:,}" for v in r["runs_tuples_per_s"]),
            f"{r['tuples_per_s'] / base:.2f}",
        )
    lat = doc["latency"]
    lines = [
        f"at {doc['config']['rate']:,.0f}/s, as a read_committed consumer of the egress topic reads: end to end "
        f"p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms; added to the node's output p50 "
        f"{lat['added_p50_ms']:.1f} ms, p99 {lat['added_p99_ms']:.1f} ms ({lat['samples']:,} results): until the "
        f"egress's record is appended p50 {lat['appended_p50_ms']:.1f} ms, p99 {lat['appended_p99_ms']:.1f} ms, then "
        f"until a consumer has it (commit wait, commit, fetch) p50 {lat['committed_p50_ms']:.1f} ms, "
        f"p99 {lat['committed_p99_ms']:.1f} ms",
        "a commit of a transactional producer alone on this broker: "
        + ", ".join(f"{q} {lat['commit_alone'][q + '_ms']:.1f} ms" for q in ("p50", "p90", "p99")),
        f"the egress's own commits in the latency run: p50 {lat['egress_commits']['p50_ms']:.1f} ms, "
        f"p99 {lat['egress_commits']['p99_ms']:.1f} ms ({lat['egress_commits']['commits']:,} commits)",
    ]
    node, eg = doc["results"][NODE]["cpu_us_per_tuple"], doc["results"][WITH]["egress_cpu_us_per_tuple"]
    lines.append(f"CPU per tuple: the node {node:.1f} µs, the egress process {eg:.1f} µs ({eg / node:.2f}× the node's)")
    if "quix_eos_x" in doc:
        lines.append(f"Quix exactly-once × at-least-once: {doc['quix_eos_x']:.2f}")
    lines += [
        f"goal {g['goal']}: {g['measured']} (want {g['want']}) " + ("[green]met[/]" if g["met"] else "[red]not met[/]")
        for g in doc["goals"]
    ]
    t.caption = "\n".join(lines)
    return t


def plot(doc: dict[str, Any], path: Path) -> None:
    """Throughput of each processor (median, every run as a dot) and the latency a consumer sees."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = list(doc["results"])
    for i, p in enumerate(names):
        r = doc["results"][p]
        a.bar(i, r["tuples_per_s"], color="tab:blue" if "quix" not in p else "tab:gray")
        a.scatter([i] * len(r["runs_tuples_per_s"]), r["runs_tuples_per_s"], color="black", s=10, zorder=3)
    a.set_xticks(range(len(names)), [n.replace(" + ", "\n+ ") for n in names], fontsize=8)
    a.set_ylabel("input tuples/s")
    a.set_title(f"throughput (with egress: {doc['x_node']:.2f}× the node alone)")
    lat = doc["latency"]
    kinds = ["p50_ms", "p99_ms", "added_p50_ms", "added_p99_ms"]
    b.bar(range(4), [lat[k] for k in kinds], color=["tab:blue", "tab:blue", "tab:orange", "tab:orange"])
    b.set_xticks(range(4), ["end to end\np50", "end to end\np99", "added\np50", "added\np99"], fontsize=8)
    b.axhline(COMMIT_MS, color="gray", ls="--", lw=1)
    b.text(3.4, COMMIT_MS, f"commit interval {COMMIT_MS} ms", ha="right", va="bottom", fontsize=8, color="gray")
    b.set_ylabel("ms")
    b.set_title(f"latency a read_committed consumer sees at {doc['config']['rate']:,.0f}/s")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.egress", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--tuples", type=int, default=None, help="pre-loaded input tuples per run (200000; --quick 50000)")
    ap.add_argument("--repeat", type=int, default=None, help="throughput runs of each processor (5; --quick 2)")
    ap.add_argument("--rate", type=float, default=1000, help="input tuples/s of the latency run")
    ap.add_argument("--paced-seconds", type=float, default=None, help="length of the latency run (20; --quick 6)")
    ap.add_argument("--quick", action="store_true", help="a small run")
    ap.add_argument("--bootstrap", help="use this broker instead of starting one")
    a = ap.parse_args(argv)
    a.tuples = a.tuples or (50_000 if a.quick else 200_000)
    a.repeat = a.repeat or (2 if a.quick else 5)
    a.paced_seconds = a.paced_seconds or (6.0 if a.quick else 20.0)
    return a


if __name__ == "__main__":
    run(parse_args())
