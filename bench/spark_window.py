"""The Spark node against the Python node on the same large-key-space sliding window, in one run.

    python -m bench.spark_window [--quick] [--tuples N] [--keys K] [--bootstrap HOST:PORT]

Both engines run the same spec (one keyed sliding-window aggregate, one partition, DPC on,
failure-free) as a real node process (``bench.throughput.worker.Worker``) on the same broker:

* **throughput**: every engine reads the same pre-loaded input, ``--tuples`` readings over
  ``--keys`` sensors, one every ``--step-ms`` of event time, with a source's boundaries. The
  figure is input tuples per second from the node's first batch to its last output. The
  benchmark checks that both engines wrote the same stable output, ids and payload bytes
  included, before it quotes any figure;
* **memory and state**: the node process's peak resident memory; for the Spark node also its
  JVM's, and the largest size its Parquet segments reached (the window state, on disk);
* **CPU** per input tuple: the node process plus, for Spark, its JVM;
* **latency** at ``--rate`` tuples/s with event time = wall clock: per window result, its
  broker append time minus that of the input tuple that closed its window
  (``bench.throughput.phases.Bench.latencies``).

Results: ``bench/results/spark_window.json`` and ``docs/spark_window.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.borealis.common import broker, machine, pyplot, save_figure
from bench.throughput.check import OutMsg, check_output, read_topic
from bench.throughput.jobs import FINAL_BOUNDARY, TOPIC_CONFIG, Job
from bench.throughput.phases import Bench, Tasks
from bench.throughput.run import console, out, progress_bars
from bench.throughput.worker import Worker
from bench.workload import window_spec
from services.client.pump import pump
from services.client.source import SourceWriter
from services.client.workload import readings
from services.core.admin import TopicSpec
from services.core.codec import codec_for
from services.core.paths import REPO_ROOT
from services.deploy.topics import topic_specs
from services.spec import Spec, parse_spec

RESULTS = REPO_ROOT / "bench" / "results" / "spark_window.json"
PLOT = REPO_ROOT / "docs" / "spark_window.png"
ENGINES = ("python", "spark")


def spark_bench_spec(name: str, source: str, engine: str, size: int, slide: int) -> str:
    # A large X: a slow engine working through the pre-loaded backlog must not time out into tentative output.
    return window_spec(name, source, "dpc: {delay: 600000}\n", size, slide, engine)


class SparkBench:
    def __init__(self, args: argparse.Namespace, bootstrap: str, tmp: Path) -> None:
        self.args, self.bootstrap = args, bootstrap
        self.base = Bench(args, bootstrap, tmp)
        self.tag = self.base.tag

    def _job(self, engine: str, tag: str, source: str, stop_after: int) -> tuple[Job, Spec]:
        a = self.args
        text = spark_bench_spec(tag, source, engine, a.size, a.slide)
        spec = parse_spec(text, source=f"<bench {tag}>")
        job = Job("node", self.bootstrap, source, spec.topic(f"{tag}_out", 0), "", stop_after, 30, text, "stats")
        self.base.provision(topic_specs(spec, 1, TOPIC_CONFIG))
        return job, spec

    def _write(self, spec: Spec, source: str, records: Any, rate: float | None, progress: Tasks, label: str) -> int:
        writer = SourceWriter(spec, source, self.bootstrap)
        n = self.args.tuples if rate is None else int(rate * self.args.paced_seconds)
        task = progress.add_task(label, total=n)
        pump(
            writer,
            records,
            rate or 0,
            progress=lambda i: progress.update(task, completed=i),
            wait_release=False,
            final_boundary=FINAL_BOUNDARY,
        )
        sent = n + writer.boundaries
        del writer
        gc.collect()
        return sent

    def preload(self, progress: Tasks) -> tuple[str, int]:
        a = self.args
        source = f"{self.tag}_in"
        self.base.provision([TopicSpec(source, 1, 1, dict(TOPIC_CONFIG))])
        _, spec = self._job("python", f"{self.tag}_src", source, 0)
        records = readings(a.tuples, sensors=a.keys, step_ms=a.step_ms)
        return source, self._write(spec, source, records, None, progress, f"pre-loading {a.tuples:,} tuples")

    def throughput(self, engine: str, source: str, messages: int, progress: Tasks) -> tuple[dict[str, Any], list]:
        n = self.args.tuples
        job, _ = self._job(engine, f"{self.tag}_{engine}", source, messages)
        task = progress.add_task(f"{engine} node", total=messages)
        w = Worker(job, self.base.log_dir)
        res = w.wait(timeout=600 + n / 100, on_tick=lambda: progress.update(task, completed=w.consumed))
        if res["consumed"] != messages:
            raise RuntimeError(f"{engine}: consumed {res['consumed']} of the input's {messages} messages")
        msgs = read_topic(self.bootstrap, job.out_topic)
        chk = check_output(engine, msgs, res.get("deadlettered", 0))
        secs = max(res["last_at"], (chk.last_append_ms or 0) / 1000) - res["first_at"]
        cpu = res["cpu_s"] + res["child_cpu_s"]
        return {
            "tuples_per_s": n / secs,
            "seconds": secs,
            "results": chk.stable,
            "cpu_us_per_tuple": cpu / n * 1e6,
            "process_rss_peak_mb": res["rss_peak_mb"],
            "jvm_rss_peak_mb": res["child_rss_peak_mb"],
            "state_on_disk_peak_mb": res["state_bytes_peak"] / 2**20,
        }, _stable(msgs)

    def latency(self, engine: str, progress: Tasks) -> dict[str, Any]:
        a = self.args
        tag = f"{self.tag}_p{engine}"
        source = f"{tag}_in"
        self.base.provision([TopicSpec(source, 1, 1, dict(TOPIC_CONFIG))])
        job, spec = self._job(engine, tag, source, 10**9)
        w = Worker(job, self.base.log_dir)
        w.wait_ready(timeout=180)
        time.sleep(0.5)
        records = readings(int(a.rate * a.paced_seconds), sensors=a.keys, seed=11, wall_clock=True)
        self._write(spec, source, records, a.rate, progress, f"{engine} at {a.rate:,.0f}/s")
        w.wait(timeout=120)
        outs = read_topic(self.bootstrap, job.out_topic)
        check_output(f"{engine} at {a.rate:,.0f}/s", outs)
        return self.base.latencies("window", source, outs, spec.dpc.bucket)


def _same_output(python: list[tuple[int, int, bytes | None]], spark: list[tuple[int, int, bytes | None]]) -> None:
    """RuntimeError naming the first difference unless both engines wrote the same stable tuples."""
    if python == spark:
        return
    stat = codec_for("window_stat")
    i = next((i for i, (p, s) in enumerate(zip(python, spark, strict=False)) if p != s), min(len(python), len(spark)))

    def show(out: list[tuple[int, int, bytes | None]]) -> str:
        if i >= len(out):
            return "nothing"
        tid, stime, value = out[i]
        return f"id {tid} at {stime}: {stat.decode(value) if value else None}"

    raise RuntimeError(
        f"the Spark and Python nodes wrote different stable outputs ({len(spark)} and {len(python)} tuples), "
        f"first at {i}: spark {show(spark)}, python {show(python)}: no figures"
    )


def _stable(msgs: list[OutMsg]) -> list[tuple[int, int, bytes | None]]:
    return [(m.id, m.stime, m.value) for m in msgs if m.type == "STABLE"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.bootstrap:
        os.environ["HASTREAM_BOOTSTRAP"] = args.bootstrap
    tmp = Path(tempfile.mkdtemp(prefix="hastream-bench-spark-"))
    try:
        with broker(console.print) as facts:
            doc = _measure(args, facts, tmp)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
        plot(doc, PLOT)
        out.print(_table(doc))
        out.print(f"results: {RESULTS.relative_to(REPO_ROOT)}, plot: {PLOT.relative_to(REPO_ROOT)}")
        return doc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _measure(args: argparse.Namespace, facts: dict[str, Any], tmp: Path) -> dict[str, Any]:
    bench = SparkBench(args, facts["bootstrap"], tmp)
    results: dict[str, dict[str, Any]] = {}
    outputs = {}
    try:
        with progress_bars() as progress:
            source, messages = bench.preload(progress)
            for e in ENGINES:
                results[e], outputs[e] = bench.throughput(e, source, messages, progress)
            _same_output(outputs["python"], outputs["spark"])
            for e in ENGINES:
                results[e]["latency"] = bench.latency(e, progress)
    finally:
        bench.base.cleanup()
    return {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(facts),
        "config": {
            k: getattr(args, k) for k in ("tuples", "keys", "step_ms", "size", "slide", "rate", "paced_seconds")
        },
        "results": results,
        "same_output": True,
    }


def _table(doc: dict[str, Any]) -> Table:
    r = doc["results"]
    t = Table(title="Spark node vs Python node, same sliding window (both outputs equal)")
    for c in ("", *ENGINES, "spark / python"):
        t.add_column(c, justify="right")
    rows = [
        ("input tuples/s", "tuples_per_s", "{:,.0f}"),
        ("CPU µs/tuple (node + JVM)", "cpu_us_per_tuple", "{:.1f}"),
        ("node process peak RSS MB", "process_rss_peak_mb", "{:.0f}"),
        ("JVM peak RSS MB", "jvm_rss_peak_mb", "{:.0f}"),
        ("state on disk, peak MB", "state_on_disk_peak_mb", "{:.1f}"),
    ]
    for label, k, fmt in rows:
        p, s = r["python"][k], r["spark"][k]
        t.add_row(label, fmt.format(p), fmt.format(s), f"{s / p:.2f}x" if p else "-")
    for q in ("p50_ms", "p99_ms"):
        p, s = r["python"]["latency"][q], r["spark"]["latency"][q]
        t.add_row(f"latency {q[:3]} ms at {doc['config']['rate']:,}/s", f"{p:.0f}", f"{s:.0f}", f"{s / p:.2f}x")
    return t


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    r, c, m = doc["results"], doc["config"], doc["machine"]
    colours = ["#2a7ab9", "#e08a2c"]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    panels = [
        ("input tuples/s (thousands)", [r[e]["tuples_per_s"] / 1000 for e in ENGINES], "throughput"),
        (
            "peak memory (MB)",
            [r[e]["process_rss_peak_mb"] + r[e]["jvm_rss_peak_mb"] for e in ENGINES],
            "node process (+ JVM for Spark)",
        ),
        ("window result latency p50 (ms)", [r[e]["latency"]["p50_ms"] for e in ENGINES], f"at {c['rate']:,}/s"),
    ]
    for ax, (ylabel, raw, title) in zip(axes, panels, strict=True):
        vals = [v if math.isfinite(v) else 0.0 for v in raw]  # a latency run too short for a sample
        bars = ax.bar(ENGINES, vals, color=colours)
        for bar, v in zip(bars, vals, strict=True):
            ax.annotate(f"{v:,.1f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.set_ylim(0, max(vals) * 1.25 or 1)
    save_figure(
        fig,
        path,
        f"sliding window {c['size'] // 1000} s every {c['slide'] // 1000} s over {c['keys']:,} keys, "
        f"{c['tuples']:,} tuples, one partition, DPC on; {m['cores']} cores, Python {m['python']}",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_window", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small run (a few minutes)")
    ap.add_argument("--tuples", type=int, default=None, help="pre-loaded input (default 200000, --quick 40000)")
    ap.add_argument("--keys", type=int, default=None, help="distinct keys (default 20000, --quick 5000)")
    ap.add_argument("--step-ms", type=int, default=1, help="event time between input tuples")
    ap.add_argument("--size", type=int, default=60_000, help="window size (ms)")
    ap.add_argument("--slide", type=int, default=5_000, help="window slide (ms)")
    ap.add_argument("--rate", type=float, default=2000, help="input tuples/s of the latency phase")
    ap.add_argument("--paced-seconds", type=float, default=None, help="latency run length (default 30, --quick 12)")
    ap.add_argument("--bootstrap", help="use this broker instead of starting one")
    a = ap.parse_args(argv)
    a.tuples = a.tuples or (40_000 if a.quick else 200_000)
    a.keys = a.keys or (5_000 if a.quick else 20_000)
    a.paced_seconds = a.paced_seconds or (12.0 if a.quick else 30.0)
    return a


def main(argv: list[str] | None = None) -> None:
    run(parse_args(argv))


if __name__ == "__main__":
    main()
