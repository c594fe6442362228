"""The cost of the fault-tolerance operators when nothing fails (SIGMOD'05, "Overhead and scalability", Table 3).

The paper's only measured failure-free overhead is SUnion's serialization: an operator that waits
until a bucket is stable delays each tuple by up to a bucket plus a boundary interval, so the
processing delay grows linearly with the boundary interval. This runs one filter+map node through
the real broker, with SUnion at several bucket sizes (boundary interval = bucket, as in the paper)
and with SUnion's serialization taken out (``PassThroughUnion``: tuples go to the operators as they
arrive). A hastream node with one input does not serialize it (``services.dpc.sunion``), so the
SUnion variants serialize it by buckets on purpose, as the paper's SUnion does every input, and measures end-to-end latency at a fixed rate and throughput on a pre-loaded input,
beside a bare confluent-kafka loop measured in the same run. The machinery is
``bench/throughput/``'s: each processor in its own process, broker append times, output checked
for dense STABLE ids only.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.borealis.common import bootstrap, fill, footer, md_table, pyplot, save_figure

PAGE = "overhead"  # docs/templates/overhead.md: the section's text
FIGURE = "borealis_overhead.png"
PROCESSOR = "filter+map"
DEFAULT_BUCKET_MS = 100  # hastream's default dpc.bucket and dpc.boundary_interval


def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {"buckets_ms": [10, 100, 500], "rate": 1000, "paced_s": 5.0, "tuples": 50_000, "repeat": 1}
    return {"buckets_ms": [10, 20, 50, 100, 200, 500], "rate": 1000, "paced_s": 10.0, "tuples": 200_000, "repeat": 3}


class _Tasks:
    """What ``bench.throughput.phases.Bench`` expects of a rich Progress, reported on the Borealis bar."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress

    def add_task(self, description: str, *, total: float | None = None) -> int:
        self.progress(description)
        return 0

    def update(self, task_id: Any, /, *, completed: float | None = None) -> None:
        pass


def run(quick: bool, progress: Any) -> dict[str, Any]:
    from bench.stats import summarize_runs
    from bench.throughput.jobs import variant_name
    from bench.throughput.phases import Bench

    s = settings(quick)
    args = argparse.Namespace(tuples=s["tuples"], rate=s["rate"], paced_seconds=s["paced_s"], repeat=s["repeat"])
    variants: list[tuple[str, int | None, bool]] = [
        ("bare", None, False),
        (PROCESSOR, None, True),
        (PROCESSOR, None, False),
    ]
    progress.plan(1 + s["repeat"] * len(variants) + 1 + len(s["buckets_ms"]) + 1)
    tmp = Path(tempfile.mkdtemp(prefix="hastream-overhead-"))
    bench = Bench(args, bootstrap(), tmp)
    tasks = _Tasks(progress)
    try:
        source, messages = bench.preload(tasks)
        progress.advance()
        runs: dict[str, list[dict[str, Any]]] = {}
        for i in range(s["repeat"]):
            for proc, bucket, plain in variants:
                name = _name(proc, plain)
                runs.setdefault(name, []).append(
                    bench.throughput_run(
                        proc, source, messages, i, tasks, bucket_ms=bucket, passthrough=plain, serialize=not plain
                    )
                )
                progress.advance()
        throughput = {name: summarize_runs(rs) for name, rs in runs.items()}
        latency = []
        for bucket, plain in [(DEFAULT_BUCKET_MS, True)] + [(b, False) for b in s["buckets_ms"]]:
            progress(f"latency: {_name(PROCESSOR, plain)} {variant_name(bucket, False)}")
            lat = bench.paced_run(PROCESSOR, tasks, bucket_ms=bucket, passthrough=plain, serialize=not plain)
            latency.append({"variant": _name(PROCESSOR, plain), "bucket_ms": None if plain else bucket, **lat})
            progress.advance()
            progress.note(
                f"overhead: {latency[-1]['variant']} bucket {bucket} ms: mean {lat['mean_ms']:.0f} ms, "
                f"p99 {lat['p99_ms']:.0f} ms"
            )
        progress("SUnion and SOutput in process (no Kafka)")
        in_process = bench.dpc_cost(tasks)[PROCESSOR]
        progress.advance()
    finally:
        bench.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "quick": quick,
        "settings": s,
        "throughput": throughput,
        "latency": latency,
        "in_process": in_process,
        "config": {
            "batch_size": bench.settings.batch_size,
            "linger_ms": bench.settings.linger_ms,
            "poll_timeout_ms": bench.settings.poll_timeout_ms,
        },
    }


def _spread(r: dict[str, Any]) -> float:
    runs = r.get("runs_cpu_s_per_mtuple") or [r["cpu_s_per_mtuple"]]
    return max(runs) - min(runs)


def _name(processor: str, plain: bool) -> str:
    if processor == "bare":
        return "bare loop"
    return "without serialization" if plain else "with SUnion + SOutput"


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope and intercept of mean latency against the boundary interval."""
    line = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    return line.slope, line.intercept


def boundary_wait(r: dict[str, Any], base_ms: float) -> float:
    """The mean wait for the source's boundary past a tuple's bucket: the mean latency, less half a
    bucket (the wait for the bucket's end) and the pass-through node's mean (everything else)."""
    return r["mean_ms"] - r["bucket_ms"] / 2 - base_ms


def _parts(result: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    lat = result["latency"]
    return next((r for r in lat if r["bucket_ms"] is None), None), sorted(
        (r for r in lat if r["bucket_ms"] is not None), key=lambda r: r["bucket_ms"]
    )


def plot(result: dict[str, Any], docs_dir: Path) -> list[Path]:
    plt = pyplot()
    s, tp = result["settings"], result["throughput"]
    plain, dpc = _parts(result)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [1.5, 1]})
    xs = [r["bucket_ms"] for r in dpc]
    for key, style, label in (("mean_ms", "o-", "mean"), ("p50_ms", "s--", "p50"), ("p99_ms", "^:", "p99")):
        a.plot(xs, [r[key] for r in dpc], style, label=f"with SUnion: {label}")
    if len(dpc) >= 2:
        slope, icpt = fit([(r["bucket_ms"], r["mean_ms"]) for r in dpc])
        a.plot(
            xs,
            [icpt + slope * x for x in xs],
            color="grey",
            lw=0.8,
            label=f"linear fit of the mean: {slope:.2f} ms per ms + {icpt:.0f} ms",
        )
    if plain:
        a.axhline(plain["mean_ms"], color="#2a9d4b", label=f"without serialization: mean {plain['mean_ms']:.1f} ms")
    a.set_xlabel("SUnion bucket = boundary interval (ms)")
    a.set_ylabel("end-to-end latency (ms)")
    a.set_title(f"latency at {s['rate']:,} tuples/s")
    a.legend(fontsize=7)
    names = list(tp)
    vals = [tp[n]["tuples_per_s"] / 1000 for n in names]
    bars = b.bar(
        [n.replace(" + ", "\n+ ").replace("without ", "without\n") for n in names],
        vals,
        color=["#888888", "#2a9d4b", "#2a7ab9"][: len(names)],
    )
    base = tp.get("bare loop", {}).get("tuples_per_s")
    for bar, n in zip(bars, names, strict=True):
        r = tp[n]
        ratio = f"\n{r['tuples_per_s'] / base:.2f}× bare" if base else ""
        b.annotate(
            f"{r['tuples_per_s'] / 1000:.1f}k{ratio}\n{r['cpu_s_per_mtuple']:.1f} µs CPU",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=7,
        )
    b.set_ylim(0, max(vals) * 1.45)
    b.set_ylabel("input tuples/s (thousands)")
    b.set_title(f"throughput, {s['tuples']:,} tuples pre-loaded")
    b.tick_params(axis="x", labelsize=7)
    c = result.get("config", {})
    title = (
        f"one filter+map node, 1 partition, 1 replica, failure-free; reading tuples, {s['rate']:,} tuples/s for "
        f"{s['paced_s']:.0f} s per latency point, batch {c.get('batch_size')}; median of {s['repeat']} throughput "
        f"run(s){' (quick run)' if result['quick'] else ''}\n{footer(result.get('machine', {}), 'each processor a separate process')}"
    )
    return [save_figure(fig, docs_dir / FIGURE, title)]


def section(result: dict[str, Any]) -> str:
    s, tp = result["settings"], result["throughput"]
    plain, dpc = _parts(result)
    base_ms = plain["mean_ms"] if plain else 0.0
    rows = (
        [
            [
                "without serialization",
                "–",
                f"{plain['mean_ms']:.1f}",
                f"{plain['p50_ms']:.0f}",
                f"{plain['p99_ms']:.0f}",
                "–",
                plain["samples"],
            ]
        ]
        if plain
        else []
    )
    rows += [
        [
            "with SUnion + SOutput",
            r["bucket_ms"],
            f"{r['mean_ms']:.1f}",
            f"{r['p50_ms']:.0f}",
            f"{r['p99_ms']:.0f}",
            f"{boundary_wait(r, base_ms):.0f}",
            r["samples"],
        ]
        for r in dpc
    ]
    lat_table = md_table(
        [
            "node",
            "bucket = boundary interval (ms)",
            "mean (ms)",
            "p50 (ms)",
            "p99 (ms)",
            "mean wait for the boundary (ms)",
            "tuples",
        ],
        rows,
    )
    waits = [boundary_wait(r, base_ms) / r["bucket_ms"] for r in dpc]
    base = tp.get("bare loop", {}).get("tuples_per_s", 0)
    tp_table = md_table(
        ["processor", "tuples/s", "× bare loop", "CPU µs per tuple", "runs (tuples/s)"],
        [
            [
                n,
                f"{r['tuples_per_s']:,.0f}",
                f"{r['tuples_per_s'] / base:.2f}" if base else "–",
                f"{r['cpu_s_per_mtuple']:.1f}",
                ", ".join(f"{v:,}" for v in r["runs_tuples_per_s"]),
            ]
            for n, r in tp.items()
        ],
    )
    slope, icpt = fit([(r["bucket_ms"], r["mean_ms"]) for r in dpc]) if len(dpc) >= 2 else (float("nan"), float("nan"))
    with_, without = tp.get("with SUnion + SOutput"), tp.get("without serialization")
    tp_line = ""
    if with_ and without:
        ratio = with_["tuples_per_s"] / without["tuples_per_s"]
        moves = fill(PAGE, "moves-slower" if ratio < 0.9 else "moves-noise", ratio=f"{ratio:.2f}")
        # Each sentence ends with a space: the next one follows on the same line.
        tp_line = (
            fill(
                PAGE,
                "kafka-cpu",
                more=f"{with_['cpu_s_per_mtuple'] - without['cpu_s_per_mtuple']:.1f}",
                with_dpc=f"{with_['cpu_s_per_mtuple']:.1f}",
                without_dpc=f"{without['cpu_s_per_mtuple']:.1f}",
                spread=f"{_spread(with_) + _spread(without):.1f}",
                moves=moves,
            )
            + " "
        )
    ip = result.get("in_process")
    ip_line = ""
    if ip:
        ip_line = (
            fill(
                PAGE,
                "in-process",
                sunion=f"{ip['sunion_us']:.2f}",
                soutput=f"{ip['soutput_us']:.2f}",
                operators=f"{ip['operators_us']:.2f}",
            )
            + " "
        )
    default = {r["bucket_ms"]: r for r in dpc}.get(DEFAULT_BUCKET_MS)
    default_line = (
        fill(
            PAGE, "default", bucket=DEFAULT_BUCKET_MS, mean=f"{default['mean_ms']:.0f}", plain=f"{plain['mean_ms']:.1f}"
        )
        + " "
        if default and plain
        else ""
    )
    return (
        fill(
            PAGE,
            "section",
            figure=FIGURE,
            rate=f"{s['rate']:,}",
            paced_s=f"{s['paced_s']:.0f}",
            tuples=f"{s['tuples']:,}",
            repeat=s["repeat"],
            latency_table=lat_table,
            throughput_table=tp_table,
            slope=f"{slope:.2f}",
            intercept=f"{icpt:.0f}",
            min_wait=f"{min(waits, default=0):.0%}",
            max_wait=f"{max(waits, default=0):.0%}",
            default=default_line,
            in_process=ip_line,
            kafka_cpu=tp_line,
            default_bucket=DEFAULT_BUCKET_MS,
        )
        + "\n"
    )
