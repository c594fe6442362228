"""Running the exchange bench: every run in turn, its figures, its table and its plot."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import uuid
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.borealis.common import machine
from bench.exchange.runs import hop_latencies, quix_run, summary, throughput_run
from bench.exchange.specs import hop_text, tasks_text, union_text, window_text
from bench.throughput.jobs import peers_python
from bench.throughput.run import bench_broker, console, out
from services.core.paths import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results" / "exchange.json"
PLOT = REPO_ROOT / "docs" / "exchange.png"


def main(argv: list[str] | None = None) -> None:
    import bench.exchange

    doc = bench.exchange.__doc__ or ""
    ap = argparse.ArgumentParser(prog="python -m bench.exchange", description=doc.split("\n\n")[0])
    ap.add_argument("--tuples", type=int, default=60_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--quick", action="store_true", help="10,000 tuples, 1 repeat, 8 s paced")
    ap.add_argument("--bootstrap")
    ap.add_argument("--replot", action="store_true", help="Run nothing: figures, table and plot from the results file.")
    a = ap.parse_args(argv)
    if a.replot:
        res = json.loads(RESULTS.read_text())
        res["figures"] = figures(res)
        RESULTS.write_text(json.dumps(res, indent=2) + "\n")
        show(res)
        plot(res)
        return
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
    if peers_python() is not None:  # Quix Streams, if `make peers` installed it
        for i in range(a.repeat):
            for name, key, by in (("quix window", "building", ""), ("quix group_by window", "sensor", "building")):
                console.print(f"[dim]{name}, run {i + 1} of {a.repeat}[/]")
                runs.setdefault(name, []).append(
                    quix_run(bootstrap, scratch, f"xq{tag}{i}{len(by)}", key, by, a.tuples)
                )
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
    if "quix group_by window" in runs:
        res["quix_group_by_wrong_windows"] = statistics.median(r["wrong"] for r in runs["quix group_by window"])
    res["figures"] = figures(res)
    return res


def figures(res: dict[str, Any]) -> dict[str, float]:
    """The goals' figures. Runs of one repeat ran back to back, so a comparison takes the median of
    the paired differences or ratios, not the difference of two medians: the machine's speed drifts
    between repeats by more than the exchange costs."""
    t, lat = res["throughput"], res["latency"]

    def added(a: str, b: str) -> float:
        return statistics.median(y - x for x, y in zip(t[a]["runs_cpu_us"], t[b]["runs_cpu_us"], strict=True))

    def ratio(a: str, b: str) -> float:
        return statistics.median(
            y / x for x, y in zip(t[a]["runs_tuples_per_s"], t[b]["runs_tuples_per_s"], strict=True)
        )

    out = {
        "exchange_cpu_us_added": added("direct", "exchange"),
        "exchange_throughput_ratio": ratio("direct", "exchange"),
        "hop_p50_ms_added": lat["exchange hop"]["p50_ms"] - lat["direct hop"]["p50_ms"],
        "hop_p99_ms_added": lat["exchange hop"]["p99_ms"] - lat["direct hop"]["p99_ms"],
        "processes_ratio": ratio("1 process", "2 processes"),
        "union_p50_ms": lat["three-source union"]["p50_ms"],
    }
    if "quix group_by window" in t:
        out["quix_group_by_cpu_us_added"] = added("quix window", "quix group_by window")
        out["quix_group_by_wrong_windows"] = res["quix_group_by_wrong_windows"]
    return out


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
    a1.bar(list(t), [v["tuples_per_s"] for v in t.values()], color="#4c72b0")
    a1.tick_params(axis="x", labelsize=7, rotation=20)
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
