"""The paper's single-node experiments (section 7.1): one node (two replicas), one of three
inputs cut off, (a) varying alpha·X against a fixed failure, Process vs Delay during the
failure, and (b) varying the failure duration with X fixed, for the policy combinations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.borealis.chain import POLICIES, RunConfig, outlier_note, over_x_note, repeat_note, run_series, verdict
from bench.borealis.common import fill, footer, md_table, pyplot, save_figure, seconds

PAGE = "single_node"  # docs/templates/single_node.md: the section's text
FIGURE = "borealis_single.png"
ALPHA = 0.9
COLOURS = {"Process & Process": "#2a7ab9", "Delay & Delay": "#e08a2c", "Process & Suspend": "#9b3fb5"}


def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "alpha_x": [1.0, 4.0],
            "alpha_x_policies": ["Process & Process"],
            "alpha_x_failure_s": 6.0,
            "durations": [2.0, 8.0],
            "duration_policies": ["Process & Process"],
            "x_ms": 3000,
        }
    return {
        "alpha_x": [0.5, 1.0, 2.0, 4.0, 8.0],
        "alpha_x_policies": ["Process & Process", "Delay & Delay"],
        "alpha_x_failure_s": 6.0,
        "durations": [2.0, 4.0, 8.0, 15.0, 30.0],
        "duration_policies": list(POLICIES),
        "x_ms": 3000,
    }


def run(quick: bool, progress: Any) -> dict[str, Any]:
    s = settings(quick)
    a_runs = [
        (
            f"αX={ax:g}s {p}",
            RunConfig(
                k=1,
                policy=p,
                alpha=ALPHA,
                x_ms=round(ax / ALPHA * 1000),
                fault_at=4.0,
                fault_s=s["alpha_x_failure_s"],
                tail_s=8.0,
            ),
        )
        for p in s["alpha_x_policies"]
        for ax in s["alpha_x"]
    ]
    d_runs = [
        (f"D={d:g}s {p}", RunConfig(k=1, policy=p, alpha=ALPHA, x_ms=s["x_ms"], fault_at=4.0, fault_s=d, tail_s=8.0))
        for p in s["duration_policies"]
        for d in s["durations"]
    ]
    progress.plan(len(a_runs) + len(d_runs))
    return {
        "quick": quick,
        "settings": s,
        "alpha_x_runs": run_series("single αX", a_runs, progress),
        "duration_runs": run_series("single D", d_runs, progress),
    }


def _curves(ax_delay: Any, ax_tent: Any, runs: list[dict[str, Any]], x_of: Any) -> None:
    for p in POLICIES:
        rs = sorted((r for r in runs if "error" not in r and r["config"]["policy"] == p), key=x_of)
        if not rs:
            continue
        xs = [x_of(r) for r in rs]
        ax_delay.plot(xs, [r["delay_new_s"] for r in rs], "o-", color=COLOURS[p], label=p)
        ax_delay.plot(xs, [r["p99_s"] for r in rs], ".:", color=COLOURS[p], alpha=0.6, label=f"{p}: p99")
        ax_tent.plot(xs, [r["n_tentative"] for r in rs], "o-", color=COLOURS[p], label=p)
        for ax, key in ((ax_delay, "delay_new_s"), (ax_tent, "n_tentative")):
            bad = [r for r in rs if not r["consistent"]]
            ax.plot([x_of(r) for r in bad], [r[key] for r in bad], "x", color="red", ms=12, mew=2)


def _clip_outliers(ax: Any, runs: list[dict[str, Any]], cap: float, x_of: Any) -> None:
    """Keep the scale readable: cut the y axis at ``cap`` and write the value of any point above it."""
    high = [r for r in runs if r["delay_new_s"] > cap]
    if not high:
        return
    ax.set_ylim(0, cap)
    for r in high:
        ax.annotate(
            f"{r['delay_new_s']:.1f} s ↑ ({r['config']['policy']})",
            (x_of(r), cap),
            xytext=(0, -14),
            textcoords="offset points",
            ha="right",
            fontsize=7,
            color="red",
        )


def plot(result: dict[str, Any], docs_dir: Path) -> list[Path]:
    plt = pyplot()
    s = result["settings"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.6))
    (a1, a2), (b1, b2) = axes
    ax_of = lambda r: r["config"]["alpha_x_s"]  # noqa: E731
    _curves(a1, a2, result["alpha_x_runs"], ax_of)
    xs = sorted(s["alpha_x"])
    a1.plot(xs, xs, ":", color="grey", label="Delay_new = αX")
    a1.set_title(f"(a) {s['alpha_x_failure_s']:.0f} s failure, varying αX: Delay_new")
    a2.set_title(f"(a) {s['alpha_x_failure_s']:.0f} s failure, varying αX: N_tentative")
    for ax in (a1, a2):
        ax.set_xlabel("αX (s)")
        ax.axvline(s["alpha_x_failure_s"], color="#cc4444", lw=0.8, ls="--", label="failure duration")
    d_of = lambda r: r["config"]["fault_s"]  # noqa: E731
    _curves(b1, b2, result["duration_runs"], d_of)
    x_s = s["x_ms"] / 1000
    b1.axhline(ALPHA * x_s, color="grey", ls=":", label="αX")
    b1.axhline(x_s, color="#cc4444", lw=0.8, label="X (the requirement)")
    b1.set_title(f"(b) X = {x_s:.0f} s (αX = {ALPHA * x_s:.1f} s), varying failure: Delay_new")
    b2.set_title("(b) varying failure duration: N_tentative")
    for ax in (b1, b2):
        ax.set_xlabel("failure duration (s)")
    for ax, runs in ((a1, result["alpha_x_runs"]), (b1, result["duration_runs"])):
        ax.set_ylabel("Delay_new at the client (s)")
        _clip_outliers(
            ax,
            [r for r in runs if "error" not in r],
            cap=2.5 * max(x_s, max(s["alpha_x"]) if ax is a1 else x_s),
            x_of=ax_of if ax is a1 else d_of,
        )
    for ax, runs in ((a2, result["alpha_x_runs"]), (b2, result["duration_runs"])):
        ax.set_ylabel("tentative tuples received by the client")
        ax.set_ylim(0, 1.15 * max([r["n_tentative"] for r in runs if "error" not in r] + [1]))
    for ax in axes.flat:
        ax.legend(fontsize=7)
    runs = result["alpha_x_runs"] + result["duration_runs"]
    rate = runs[0]["config"]["rate"] if runs else "?"
    title = (
        f"One node (union + filter), 2 replicas, 1 of 3 inputs cut off, {rate} tuples/s per input, "
        f"checkpoint/redo{' (quick run)' if result['quick'] else ''}; red x = eventual consistency failed\n"
        f"{footer(result.get('machine', {}))}"
    )
    return [save_figure(fig, docs_dir / FIGURE, title)]


def _rows(runs: list[dict[str, Any]], x: str) -> list[list[Any]]:
    return [
        [
            r["config"]["policy"],
            f"{r['config'][x]:.2g}",
            seconds(r.get("delay_new_s")),
            r.get("n_tentative", "–"),
            verdict(r),
        ]
        for r in runs
    ]


def section(result: dict[str, Any]) -> str:
    s = result["settings"]
    ta = md_table(
        ["policy", "αX (s)", "Delay_new (s)", "N_tentative", "eventually consistent"],
        _rows(result["alpha_x_runs"], "alpha_x_s"),
    )
    ok = lambda rs: [r for r in rs if "error" not in r]  # noqa: E731
    a_runs, d_runs = ok(result["alpha_x_runs"]), ok(result["duration_runs"])
    ax_line = "; ".join(
        fill(
            PAGE,
            "alpha-x-policy",
            policy=p,
            points=", ".join(
                fill(PAGE, "alpha-x-point", delay=f"{r['delay_new_s']:.1f}", alpha_x=f"{r['config']['alpha_x_s']:.2g}")
                for r in a_runs
                if r["config"]["policy"] == p
            ),
        )
        for p in s["alpha_x_policies"]
    )
    d_line = ", ".join(
        fill(PAGE, "duration-point", count=r["n_tentative"], failure_s=f"{r['config']['fault_s']:g}")
        for r in d_runs
        if r["config"]["policy"] == "Process & Process"
    )
    rate = a_runs[0]["config"]["rate"] if a_runs else 100
    n_expect = fill(
        PAGE,
        "expected",
        failure_s=f"{s['alpha_x_failure_s']:g}",
        rate=rate,
        count=round(s["alpha_x_failure_s"] * 2 * rate),
    )
    tb = md_table(
        ["policy", "failure (s)", "Delay_new (s)", "N_tentative", "eventually consistent"],
        _rows(result["duration_runs"], "fault_s"),
    )
    notes = (
        outlier_note(result["alpha_x_runs"] + result["duration_runs"])
        + over_x_note(d_runs)
        + repeat_note(a_runs + d_runs)
    )
    return fill(
        PAGE,
        "section",
        figure=FIGURE,
        failure_s=f"{s['alpha_x_failure_s']:.0f}",
        alpha_xs=", ".join(f"{v:g}" for v in s["alpha_x"]),
        alpha=ALPHA,
        x_s=f"{s['x_ms'] / 1000:.0f}",
        durations=", ".join(f"{v:g}" for v in s["durations"]),
        quick_mode=fill(PAGE, "quick-mode") if result["quick"] else "",
        table_a=ta,
        table_b=tb,
        alpha_x_reading=ax_line,
        expected=n_expect,
        duration_reading=d_line,
        delay_reading=_delay_reading(a_runs, s["alpha_x_failure_s"]),
        notes=notes,
    )


def _delay_reading(runs: list[dict[str, Any]], failure_s: float) -> str:
    """Does Delay save tentative tuples against Process at the same αX, as the paper found?"""
    by = {(r["config"]["policy"], r["config"]["alpha_x_s"]): r for r in runs}
    pairs = [
        (ax, by[("Process & Process", ax)]["n_tentative"], r["n_tentative"], r["config"]["rate"])
        for (p, ax), r in sorted(by.items())
        if p == "Delay & Delay" and ax < failure_s and ("Process & Process", ax) in by
    ]
    if not pairs:
        return fill(PAGE, "delay-not-run")
    cells = ", ".join(
        fill(
            PAGE,
            "delay-pair",
            delay=d,
            process=pr,
            alpha_x=f"{ax:.2g}",
            expected=max(0, round((failure_s - ax) * 2 * rate)),
        )
        for ax, pr, d, rate in pairs
    )
    saves = all(d < pr for _, pr, d, _ in pairs)
    return fill(PAGE, "delay-saves" if saves else "delay-does-not-save", pairs=cells)
