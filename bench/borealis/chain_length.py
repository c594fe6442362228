"""The paper's headline experiment (section 7.2, "effects of path length"): a chain of 1..4 nodes,
two replicas each, one of three inputs cut off for 15 s; Delay_new and N_tentative at the client
for Process & Process, Delay & Delay and Process & Suspend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.borealis.chain import POLICIES, RunConfig, outlier_note, over_x_note, repeat_note, run_series, verdict
from bench.borealis.common import fill, footer, md_table, pyplot, save_figure, seconds

PAGE = "chain_length"  # docs/templates/chain_length.md: the section's text
FIGURE = "borealis_chain.png"


def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {"ks": [1, 2, 3], "policies": ["Process & Process"], "fault_s": 10.0, "fault_at": 5.0, "tail_s": 10.0}
    return {"ks": [1, 2, 3, 4], "policies": list(POLICIES), "fault_s": 15.0, "fault_at": 5.0, "tail_s": 12.0}


def run(quick: bool, progress: Any) -> dict[str, Any]:
    s = settings(quick)
    runs = [
        (
            f"k={k} {p}",
            RunConfig(k=k, policy=p, fault="source", fault_at=s["fault_at"], fault_s=s["fault_s"], tail_s=s["tail_s"]),
        )
        for p in s["policies"]
        for k in s["ks"]
    ]
    progress.plan(len(runs))
    return {"quick": quick, "settings": s, "runs": run_series("chain", runs, progress)}


def plot(result: dict[str, Any], docs_dir: Path) -> list[Path]:
    plt = pyplot()
    runs = [r for r in result["runs"] if "error" not in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.4))
    colours = {"Process & Process": "#2a7ab9", "Delay & Delay": "#e08a2c", "Process & Suspend": "#9b3fb5"}
    for p in result["settings"]["policies"]:
        rs = sorted((r for r in runs if r["config"]["policy"] == p), key=lambda r: r["config"]["k"])
        if not rs:
            continue
        ks = [r["config"]["k"] for r in rs]
        a.plot(ks, [r["delay_new_s"] for r in rs], "o-", color=colours[p], label=p)
        b.plot(ks, [r["n_tentative"] for r in rs], "o-", color=colours[p], label=p)
        b.plot(
            ks,
            [r.get("tentative_unique", r["n_tentative"]) for r in rs],
            "o--",
            color=colours[p],
            alpha=0.5,
            label=f"{p}: distinct tuples",
        )
        for ax, key in ((a, "delay_new_s"), (b, "n_tentative")):
            bad = [r for r in rs if not r["consistent"]]
            ax.plot([r["config"]["k"] for r in bad], [r[key] for r in bad], "x", color="red", ms=12, mew=2)
    ks = sorted({r["config"]["k"] for r in runs}) or [1]
    ax_s = runs[0]["config"]["alpha_x_s"] if runs else 2.7
    x_s = runs[0]["config"]["x_ms"] / 1000 if runs else 3.0
    a.plot(ks, [ax_s] * len(ks), ":", color="grey", label="αX (paper: Process & Process ≈ αX + processing)")
    a.plot(ks, [k * ax_s for k in ks], "--", color="grey", label="k·αX (paper: Delay & Delay)")
    a.plot(ks, [k * x_s for k in ks], "-", color="#cc4444", lw=0.8, label="k·X (the requirement)")
    a.set_xlabel("nodes in the chain (k)")
    a.set_ylabel("Delay_new at the client (s)")
    a.set_title("availability: max delay of new tuples")
    a.set_xticks(ks)
    a.legend(fontsize=7)
    b.set_xlabel("nodes in the chain (k)")
    b.set_ylabel("tentative tuples received by the client")
    b.set_title("inconsistency: N_tentative")
    b.set_xticks(ks)
    b.set_ylim(0, 1.15 * max([r["n_tentative"] for r in runs] + [1]))
    b.legend(fontsize=7)
    s, c = result["settings"], (runs[0]["config"] if runs else {})
    title = (
        f"{s['fault_s']:.0f} s failure of 1 of 3 inputs, {c.get('rate', '?')} tuples/s per input, X = "
        f"{x_s:.0f} s per node (α = {c.get('alpha', '?')}), 2 replicas per node, checkpoint/redo"
        f"{' (quick run)' if result['quick'] else ''}; red x = eventual consistency failed\n"
        f"{footer(result.get('machine', {}))}"
    )
    return [save_figure(fig, docs_dir / FIGURE, title)]


def section(result: dict[str, Any]) -> str:
    runs = result["runs"]
    s = result["settings"]
    rows = [
        [
            r["label"].split(" ", 1)[1],
            r["config"]["k"],
            seconds(r.get("delay_new_s")),
            seconds(r.get("p99_s")),
            r.get("n_tentative", "–"),
            r.get("client_switches", "–"),
            verdict(r),
        ]
        for r in runs
    ]
    table = md_table(
        ["policy", "k", "Delay_new (s)", "p99 delay (s)", "N_tentative", "client switches", "eventually consistent"],
        rows,
    )
    by = {(r["config"]["policy"], r["config"]["k"]): r for r in runs if "error" not in r}
    pp = [by[k] for k in sorted(by) if k[0] == "Process & Process"]
    ax = pp[0]["config"]["alpha_x_s"] if pp else 2.7
    c = runs[0]["config"] if runs else {"fault_s": 0, "rate": 0}
    return (
        fill(
            PAGE,
            "section",
            figure=FIGURE,
            ks=", ".join(map(str, s["ks"])),
            policies=", ".join(s["policies"]),
            fault_at=f"{s['fault_at']:.0f}",
            fault_s=f"{s['fault_s']:.0f}",
            tail_s=f"{s['tail_s']:.0f}",
            quick_mode=fill(PAGE, "quick-mode") if result["quick"] else "",
            table=table,
            ax=f"{ax:.1f}",
            reading=_chain_reading(by, ax),
            why=_why(by, ax, c),
            notes=outlier_note(runs) + over_x_note(runs) + repeat_note(runs),
            rate=runs[0]["config"]["rate"] if runs else "?",
        )
        + "\n"
    )


def _chain_reading(by: dict[tuple[str, int], dict[str, Any]], ax: float) -> str:
    """A sentence per policy on what the numbers show."""
    out = []
    for p in POLICIES:
        rs = [by[k] for k in sorted(by) if k[0] == p]
        if not rs:
            continue
        out.append(
            fill(
                PAGE,
                "reading",
                policy=p,
                delays=", ".join(f"{r['delay_new_s']:.1f}" for r in rs),
                counts=", ".join(str(r["n_tentative"]) for r in rs),
                ks=", ".join(str(r["config"]["k"]) for r in rs),
            )
        )
    return " ".join(out)


def _series(by: dict[tuple[str, int], dict[str, Any]], policy: str, key: str, fmt: str = "{}") -> str:
    rs = [by[k] for k in sorted(by) if k[0] == policy]
    return ", ".join(fmt.format(r[key]) for r in rs)


def _why(by: dict[tuple[str, int], dict[str, Any]], ax: float, c: dict[str, Any]) -> str:
    """The comparison with the paper, from the numbers of this run."""
    if not by:
        return fill(PAGE, "why-none")
    x = c["x_ms"] / 1000
    pp = sorted((r for (p, _), r in by.items() if p == "Process & Process"), key=lambda r: r["config"]["k"])
    dd = sorted((r for (p, _), r in by.items() if p == "Delay & Delay"), key=lambda r: r["config"]["k"])
    out = []
    if pp:
        spread = max(r["delay_new_s"] for r in pp) - ax
        out.append(
            fill(
                PAGE,
                "why-pp-delay",
                delays=_series(by, "Process & Process", "delay_new_s", "{:.2f}"),
                spread=f"{spread:.2f}",
            )
        )
        base = round(c["fault_s"] * 2 * c["rate"])
        out.append(
            fill(
                PAGE,
                "why-pp-tentative",
                counts=_series(by, "Process & Process", "n_tentative"),
                fault_s=f"{c['fault_s']:.0f}",
                rate=c["rate"],
                base=base,
                extra=max(r["n_tentative"] for r in pp) - base,
            )
        )
    if dd:
        over = [r for r in dd if r["delay_new_s"] > r["config"]["k"] * x]
        bound = (
            fill(PAGE, "dd-within")
            if not over
            else fill(
                PAGE,
                "dd-over",
                runs="; ".join(
                    fill(
                        PAGE,
                        "dd-over-run",
                        k=r["config"]["k"],
                        delay=f"{r['delay_new_s']:.2f}",
                        kx=f"{r['config']['k'] * x:.0f}",
                        excess=f"{r['delay_new_s'] - r['config']['k'] * x:.2f}",
                    )
                    for r in over
                ),
            )
        )
        est = ", ".join(
            str(max(0, round((r["config"]["fault_s"] - r["config"]["k"] * ax) * 2 * r["config"]["rate"]))) for r in dd
        )
        out.append(
            fill(PAGE, "why-dd-delay", delays=_series(by, "Delay & Delay", "delay_new_s", "{:.2f}"), bound=bound)
        )
        out.append(fill(PAGE, "why-dd-tentative", counts=_series(by, "Delay & Delay", "n_tentative"), estimates=est))
    out.append(fill(PAGE, "why-suspend"))
    return "\n".join(out)
