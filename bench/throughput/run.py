"""The benchmark run: a broker, ``Bench``'s three phases, the goals against the baselines of the
same run, the tables, and the results file and plot."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.borealis.common import machine
from bench.stats import summarize_runs
from bench.throughput.check import compare_outputs
from bench.throughput.jobs import FINAL_BOUNDARY, PEERS, PROCESSORS, make_job, peers_python
from bench.throughput.phases import WARMUP_S, Bench
from bench.throughput.plot import plot
from bench.workload import SENSORS, WINDOW_SIZE_MS, WINDOW_SLIDE_MS
from services.core.paths import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results" / "throughput.json"
PLOT = REPO_ROOT / "docs" / "throughput.png"
PROFILE_OUT = REPO_ROOT / "bench" / "results" / "filter_node.prof"
# What hastream aims at on this machine, against baselines measured in the same run.
MIN_X_AVRO = 0.9  # filter+map tuples/s against the bare Avro loop doing the same work
MIN_X_QUIX = 5.0  # filter+map and window tuples/s against Quix Streams
P50_OVER_QUIX_MS = {"filter+map": 2.0, "window": 10.0}  # p50 latency at most Quix's plus this
MAX_P99_MS = 20.0  # filter+map p99 latency

console = Console(stderr=True, highlight=False)  # progress and status
out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)  # the figures


def _machine(bootstrap_external: bool) -> dict[str, Any]:
    from infra.kafka.cluster import KAFKA_VERSION

    return machine(
        {
            "kafka": "external broker (version not probed)" if bootstrap_external else KAFKA_VERSION,
            "broker": "external (--bootstrap)" if bootstrap_external else "embedded 1-broker KRaft",
        }
    )


def check_goals(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each goal with the figure measured and whether it was met (those whose baseline was not run are left out)."""
    goals: list[dict[str, Any]] = []

    def goal(name: str, value: float, want: str, met: bool) -> None:
        goals.append({"goal": name, "measured": round(value, 2), "want": want, "met": met})

    fm = results["filter+map"]
    goal("filter+map tuples/s × Avro loop", fm["x_avro"], f">= {MIN_X_AVRO}", fm["x_avro"] >= MIN_X_AVRO)
    for p in ("filter+map", "window"):
        r, quix = results[p], results.get(f"quix {p}")
        if quix is None:
            continue
        goal(f"{p} tuples/s × Quix", r["x_quix"], f">= {MIN_X_QUIX}", r["x_quix"] >= MIN_X_QUIX)
        if r["latency"] and quix["latency"]:
            over = r["latency"]["p50_ms"] - quix["latency"]["p50_ms"]
            goal(f"{p} p50 ms over Quix's", over, f"<= {P50_OVER_QUIX_MS[p]}", over <= P50_OVER_QUIX_MS[p])
    if fm["latency"]:
        p99 = fm["latency"]["p99_ms"]
        goal("filter+map p99 ms", p99, f"< {MAX_P99_MS}", p99 < MAX_P99_MS)
    return goals


def _table(results: dict[str, dict[str, Any]], goals: list[dict[str, Any]]) -> Table:
    t = Table(title="throughput and latency (1 partition, 1 process each)", caption_justify="left")
    t.add_column("processor", no_wrap=True)
    for col in ("tuples/s", "× bare", "× Avro loop", "× Quix", "out/in", "CPU µs/tuple", "p50 ms", "p99 ms"):
        t.add_column(col, justify="right", no_wrap=True)

    def ms(v: float | None) -> str:
        return "–" if v is None or v != v else f"{v:.1f}"

    for name, r in results.items():
        lat = r.get("latency") or {}
        t.add_row(
            name,
            f"{r['tuples_per_s']:,.0f}",
            f"{r['ratio']:.2f}",
            f"{r['x_avro']:.2f}",
            f"{r['x_quix']:.1f}" if "x_quix" in r else "–",
            f"{r['output'] / max(1, r['consumed']):.2f}",
            f"{r['cpu_s_per_mtuple']:.1f}",
            ms(lat.get("p50_ms")),
            ms(lat.get("p99_ms")),
        )
    t.caption = "\n".join(
        f"goal {g['goal']}: {g['measured']} (want {g['want']}) " + ("[green]met[/]" if g["met"] else "[red]not met[/]")
        for g in goals
    )
    return t


def _dpc_table(cost: dict[str, dict[str, Any]], results: dict[str, dict[str, Any]]) -> Table:
    t = Table(
        title="DPC in the failure-free case: CPU per input tuple, in process (bench/dpc_cost.py)",
        caption_justify="left",
    )
    t.add_column("node", no_wrap=True)
    for col in ("operators µs", "SUnion µs", "SOutput µs", "node step µs", "DPC overhead µs", "of node CPU"):
        t.add_column(col, justify="right", no_wrap=True)
    for name, c in cost.items():
        node_cpu = results[name]["cpu_s_per_mtuple"]
        t.add_row(
            name,
            f"{c['operators_us']:.2f}",
            f"{c['sunion_us']:.2f}",
            f"{c['soutput_us']:.2f}",
            f"{c['node_step_us']:.2f}",
            f"{c['dpc_overhead_us']:.2f}",
            f"{c['dpc_overhead_us'] / node_cpu:.0%}",
        )
    t.caption = (
        "node step = SUnion push/boundary/poll + operators + SOutput + advance, as NodeService runs them; "
        "DPC overhead = node step - operators; 'of node CPU' relates it to the Kafka run's CPU µs/tuple"
    )
    return t


def _print_profile(path: Path, top: int = 22) -> None:
    st = pstats.Stats(str(path))
    st.sort_stats("tottime")
    total = st.total_tt  # type: ignore[attr-defined]
    t = Table(title=f"filter+map node profile (cProfile, by own time; total {total:.2f}s)")
    for col in ("function", "calls", "own s", "own %", "cum s"):
        t.add_column(col, justify="left" if col == "function" else "right")
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in rows:
        where = f"{Path(file).name}:{line}" if line else file
        t.add_row(f"{fn} ({where})", f"{nc:,}", f"{tt:.3f}", f"{100 * tt / total:.1f}", f"{ct:.3f}")
    out.print(t)


def progress_bars() -> Progress:
    """The benchmarks' progress display: one bar per run, with counts and elapsed time."""
    cols = (
        SpinnerColumn(),
        TextColumn("{task.description:<26}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    return Progress(*cols, console=console)


@dataclass
class Measured:
    """What the phases measured: each processor's throughput runs and latency run, whether their
    outputs were equal, and the in-process DPC cost."""

    runs: dict[str, list[dict[str, Any]]]
    latency: dict[str, dict[str, Any]]
    equal: dict[str, Any]
    dpc_cost: dict[str, dict[str, Any]]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark: a broker (``--bootstrap``'s or our own), the phases, the tables, and the
    results file and plot."""
    with bench_broker(args.bootstrap, "hastream-bench-") as (bootstrap, tmp):
        bench = Bench(args, bootstrap, tmp)
        processors = [p for p in PROCESSORS if p not in PEERS or peers_python() is not None]
        if len(processors) < len(PROCESSORS):
            console.print("[yellow]Quix Streams is not installed: its rows are skipped (`make peers` installs it)[/]")
        measured = _measure(args, bench, processors, cleanup=bool(args.bootstrap))
        results = _results(processors, measured)
        goals = check_goals(results)
        out.print(_table(results, goals))
        out.print(_dpc_table(measured.dpc_cost, results))
        if args.profile:
            _print_profile(PROFILE_OUT)
        doc = _document(args, bench, goals, results, measured)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
        plot(doc, PLOT)
        out.print(f"figures written to {RESULTS.relative_to(REPO_ROOT)}, plot to {PLOT.relative_to(REPO_ROOT)}")
        return doc


@contextmanager
def bench_broker(bootstrap: str | None, prefix: str) -> Iterator[tuple[str, Path]]:
    """(the broker's bootstrap, a scratch folder) for one benchmark run: ``bootstrap``'s broker, or a
    1-broker cluster of our own in the folder, stopped at the end; the folder is deleted then."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = None
    try:
        if bootstrap is None:
            from infra.kafka.cluster import KafkaCluster

            with console.status("starting a 1-broker Kafka cluster"):
                t0 = time.monotonic()
                cluster = KafkaCluster(brokers=1, data_dir=tmp / "kafka").start()
                bootstrap = cluster.bootstrap
            console.print(f"broker up at {bootstrap} in {time.monotonic() - t0:.1f}s")
        yield bootstrap, tmp
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _measure(args: argparse.Namespace, bench: Bench, processors: list[str], cleanup: bool) -> Measured:
    """The three phases, under one progress display; ``cleanup``: delete the topics at the end (a
    broker of our own is stopped instead)."""
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in processors}
    latency: dict[str, dict[str, Any]] = {}
    try:
        with progress_bars() as progress:
            source, messages = bench.preload(progress)
            for i in range(args.repeat):
                for p in processors:
                    runs[p].append(bench.throughput_run(p, source, messages, i, progress))
            with console.status("checking that every processor computed the same results"):
                equal = compare_outputs(bench.bootstrap, {p: rs[0]["out_topic"] for p, rs in runs.items()})
            for p in processors:
                latency[p] = bench.paced_run(p, progress)
            if args.profile:
                PROFILE_OUT.parent.mkdir(parents=True, exist_ok=True)
                bench.throughput_run(
                    "filter+map", source, messages, args.repeat, progress, profile_out=str(PROFILE_OUT)
                )
            dpc_cost = bench.dpc_cost(progress)
    finally:
        if cleanup:
            bench.cleanup()
    return Measured(runs, latency, equal, dpc_cost)


def _results(processors: list[str], measured: Measured) -> dict[str, dict[str, Any]]:
    """Each processor's figures: medians of its runs, its latency, and its ratios to the baselines."""
    results: dict[str, dict[str, Any]] = {}
    for p in processors:
        rs = measured.runs[p]
        results[p] = {**summarize_runs(rs), "latency": measured.latency.get(p)}
        if p in ("filter+map", "window"):
            results[p]["restart_images_per_run"] = [r["restart_images"] for r in rs]
    base = results["bare"]
    for r in results.values():
        r["ratio"] = r["tuples_per_s"] / base["tuples_per_s"]
        r["x_avro"] = r["tuples_per_s"] / results["avro"]["tuples_per_s"]
    for p in ("filter+map", "window"):
        if f"quix {p}" in results:
            results[p]["x_quix"] = results[p]["tuples_per_s"] / results[f"quix {p}"]["tuples_per_s"]
    return results


DEFINITIONS = {
    "timestamps": "broker LogAppendTime on every topic",
    "tuples_per_s": "input data tuples / (end of last batch - receipt of first batch); median of runs",
    "avro": "bare loop that decodes each reading (parsed schema), filters, maps and encodes it",
    "quix": "Quix Streams application with the same filter+map and hopping window (bench/quix_app.py)",
    "equal_outputs": "the results of run 1 of every processor, decoded and compared before any figure",
    "output": "STABLE data tuples in the output topic (ids checked dense); a TENTATIVE, UNDO or REC_DONE "
    "tuple fails the benchmark; BOUNDARY tuples are control, counted in output_types only",
    "cpu_s_per_mtuple": "worker process CPU time (all threads) per input data tuple, in µs; median of runs",
    "latency": "output append time - append time of the input it came from (window: the input that "
    "closed the window); paced phase, first second and inputs released by the final "
    "boundary excluded",
    "dpc_cost": "in-process CPU µs per input tuple: operators alone vs SUnion -> operators -> SOutput "
    "as NodeService runs them (bench/dpc_cost.py); best of 3",
}


def _document(
    args: argparse.Namespace, bench: Bench, goals: list[dict[str, Any]], results: dict[str, Any], measured: Measured
) -> dict[str, Any]:
    """The results file: the figures, with the machine, the configuration and the definitions."""
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": _machine(bool(args.bootstrap)),
        "config": _config(args, bench),
        "definitions": dict(DEFINITIONS),
        "goals": goals,
        "equal_outputs": measured.equal,
        "results": results,
        "dpc_cost": measured.dpc_cost,
    }


def _config(args: argparse.Namespace, bench: Bench) -> dict[str, Any]:
    """The run's settings: the arguments, the clients' batching and the nodes' DPC settings."""
    st = bench.settings
    cfg_spec = make_job("filter+map", "cfg", "cfg_in", bench.bootstrap, 0, 0)[1]
    assert cfg_spec is not None
    dpc = cfg_spec.dpc
    return {
        "tuples": args.tuples,
        "repeat": args.repeat,
        "quick": args.quick,
        "paced_rate": args.rate,
        "paced_seconds": args.paced_seconds,
        "warmup_s": WARMUP_S,
        "partitions": 1,
        "sensors": SENSORS,
        "window": {"size_ms": WINDOW_SIZE_MS, "slide_ms": WINDOW_SLIDE_MS},
        "batch_size": st.batch_size,
        "poll_timeout_ms": st.poll_timeout_ms,
        "linger_ms": st.linger_ms,
        "input_boundaries": bench.input_boundaries,
        "final_boundary_stime": FINAL_BOUNDARY,
        "dpc": {
            "bucket_ms": dpc.bucket,
            "boundary_interval_ms": dpc.boundary_interval,
            "restart_image_interval_ms": dpc.restart_image_interval,
            "delay_ms": dpc.delay,
            "alpha": dpc.alpha,
            "heartbeat_interval_ms": dpc.heartbeat_interval,
            "replicas": 1,
        },
    }
