"""The benches' statistics: percentiles of latencies, and the medians of repeated throughput runs."""

from __future__ import annotations

import statistics
from typing import Any


def pct(sorted_vals: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1, int(round(q / 100 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


def summarize_runs(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated ``Bench.throughput_run`` results of one processor: medians, and each run's figures."""
    cpu = [r["cpu_s"] / r["consumed"] * 1e6 for r in rs]
    return {
        "tuples_per_s": statistics.median(r["tuples_per_s"] for r in rs),
        "runs_tuples_per_s": [round(r["tuples_per_s"]) for r in rs],
        "consumed": rs[0]["consumed"],
        "messages_consumed": rs[0]["messages_consumed"],
        "output": rs[0]["output"],
        "output_types": rs[0]["output_types"],
        "cpu_s_per_mtuple": statistics.median(cpu),
        "runs_cpu_s_per_mtuple": [round(c, 1) for c in cpu],
    }
