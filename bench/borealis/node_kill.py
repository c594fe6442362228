"""Beyond the paper's figures: the headline metrics when a node replica dies (kill -9) instead of an
input failing. The paper only states that switching upstream neighbours is fast compared with αX,
so node failures are masked; this measures it end to end through the chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.borealis.chain import RunConfig, run_series, verdict
from bench.borealis.common import fill, footer, md_table, pyplot, save_figure, seconds

PAGE = "node_kill"  # docs/templates/node_kill.md: the section's text
FIGURE = "borealis_kill.png"


def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {"ks": [3], "where": ["head", "sink"], "down_s": 5.0}
    return {"ks": [1, 2, 3, 4], "where": ["head", "sink"], "down_s": 5.0}


def run(quick: bool, progress: Any) -> dict[str, Any]:
    s = settings(quick)
    runs = []
    for where in s["where"]:
        for k in s["ks"]:
            if where == "sink" and k == 1:
                continue  # the same replica as "head"
            runs.append(
                (
                    f"k={k} kill {'n1' if where == 'head' else f'n{k}'}",
                    RunConfig(k=k, fault="kill", kill=where, fault_at=5.0, fault_s=s["down_s"], tail_s=8.0),
                )
            )
    progress.plan(len(runs))
    out = run_series("kill", runs, progress)
    for r, (_, cfg) in zip(out, runs, strict=True):
        r["where"] = cfg.kill
    return {"quick": quick, "settings": s, "runs": out}


def plot(result: dict[str, Any], docs_dir: Path) -> list[Path]:
    plt = pyplot()
    runs = [r for r in result["runs"] if "error" not in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.38
    for i, (where, colour) in enumerate((("head", "#2a7ab9"), ("sink", "#e08a2c"))):
        rs = sorted((r for r in runs if r["where"] == where), key=lambda r: r["config"]["k"])
        if not rs:
            continue
        xs = [r["config"]["k"] + (i - 0.5) * width for r in rs]
        label = "kill n1 (head of the client's path)" if where == "head" else "kill nk (the client's replica)"
        bars = a.bar(xs, [r["delay_new_s"] for r in rs], width, color=colour, label=label)
        for bar, r in zip(bars, rs, strict=True):
            a.annotate(
                f"{r['n_tentative']} T" + ("" if r["consistent"] else " ✗"),
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        worst = max(rs, key=lambda r: r["config"]["k"])
        b.plot(
            [t for t, _ in worst["timeline"]],
            [v for _, v in worst["timeline"]],
            color=colour,
            label=f"{label}, k={worst['config']['k']}",
        )
    c = runs[0]["config"] if runs else {}
    a.axhline(c.get("failure_timeout_ms", 800) / 1000, color="grey", ls=":", label="failure timeout")
    a.axhline(c.get("alpha_x_s", 2.7), color="#cc4444", lw=0.8, label="αX per node")
    a.set_xlabel("nodes in the chain (k)")
    a.set_ylabel("Delay_new at the client (s)")
    a.set_title("max delay of new tuples (label: tentative tuples at the client)")
    a.set_xticks(sorted({r["config"]["k"] for r in runs}) or [1])
    a.legend(fontsize=7)
    b.set_xlabel("generation time of the input tuple (s into the run)")
    b.set_ylabel("max delay to the client per 0.5 s (s)")
    b.set_title(
        f"delay over time: killed at {c.get('fault_at', 5):.0f} s, restarted at "
        f"{c.get('fault_at', 5) + c.get('fault_s', 5):.0f} s"
    )
    b.legend(fontsize=7)
    title = (
        f"kill -9 of a node replica, restarted after {result['settings']['down_s']:.0f} s; "
        f"{c.get('rate', '?')} tuples/s per input (3 inputs), heartbeat {c.get('heartbeat_ms')} ms, failure timeout "
        f"{c.get('failure_timeout_ms')} ms{' (quick run)' if result['quick'] else ''}\n"
        f"{footer(result.get('machine', {}))}"
    )
    return [save_figure(fig, docs_dir / FIGURE, title)]


def section(result: dict[str, Any]) -> str:
    s = result["settings"]
    rows = [
        [
            r["label"] + (f" ({r['killed'].rsplit('.', 1)[0]})" if r.get("killed") else ""),
            seconds(r.get("delay_new_s")),
            seconds(r.get("p99_s")),
            r.get("n_tentative", "–"),
            r.get("client_switches", "–"),
            verdict(r),
        ]
        for r in result["runs"]
    ]
    table = md_table(
        ["run", "Delay_new (s)", "p99 delay (s)", "N_tentative", "client switches", "eventually consistent"], rows
    )
    c: dict[str, Any] = next((r["config"] for r in result["runs"] if "error" not in r), {})
    ok = [r for r in result["runs"] if "error" not in r]
    summary = (
        fill(
            PAGE,
            "summary",
            min_delay=f"{min(r['delay_new_s'] for r in ok):.2f}",
            max_delay=f"{max(r['delay_new_s'] for r in ok):.2f}",
            runs=len(ok),
            tentative=sum(r["n_tentative"] for r in ok),
            consistent=sum(r["consistent"] for r in ok),
            all=len(result["runs"]),
        )
        if ok
        else ""
    )
    return (
        fill(
            PAGE,
            "section",
            figure=FIGURE,
            down_s=f"{s['down_s']:.0f}",
            killed="; ".join(fill(PAGE, "killed", where=w, what=fill(PAGE, f"where-{w}")) for w in s["where"]),
            heartbeat_ms=c.get("heartbeat_ms", "?"),
            timeout_ms=c.get("failure_timeout_ms", "?"),
            table=table,
            summary=summary,
        )
        + "\n"
    )
