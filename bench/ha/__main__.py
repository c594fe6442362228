"""Run the HA paper's evaluation on hastream, keep the numbers, draw the figures, write docs/ha.md.

    python -m bench.ha [--quick] [--only NAME[,NAME]] [--replot]
    hastream bench ha [--quick] [--only NAME] [--replot]

Every run is a node of two replicas under the coordinator on one broker (``HASTREAM_BOOTSTRAP``,
or an embedded one started here), killed with kill -9 mid-run (``bench.ha.run``). Results go to
``bench/results/ha.json`` (``--only`` replaces just those experiments), figures to ``docs/``,
and ``docs/ha.md`` is written from ``docs/templates/ha.md`` and the numbers on file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from bench.borealis.common import DOCS, broker, fill, footer, machine, md_table, pyplot, save_figure
from bench.ha import experiments as ex
from bench.ha.run import Config, run
from services.core.paths import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results" / "ha.json"
PAGE = "ha"  # docs/templates/ha.md
console = Console(highlight=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.ha", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer points per experiment (about 10 minutes)")
    ap.add_argument("--only", default="", help=f"comma-separated experiments to run ({', '.join(ex.EXPERIMENTS)})")
    ap.add_argument("--replot", action="store_true", help="run nothing: redraw figures and docs from the results file")
    a = ap.parse_args(argv)
    a.names = [n.strip() for n in a.only.split(",") if n.strip()] or list(ex.EXPERIMENTS)
    unknown = [n for n in a.names if n not in ex.EXPERIMENTS]
    if unknown:
        ap.exit(2, f"error: unknown experiment(s) {', '.join(unknown)} (known: {', '.join(ex.EXPERIMENTS)})\n")
    return a


def load() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {"experiments": {}}


def save(doc: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1, default=str) + "\n")


def run_all(names: list[str], quick: bool, doc: dict[str, Any]) -> None:
    cols = (
        SpinnerColumn(),
        TextColumn("{task.description:<44}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    plans = {n: ex.EXPERIMENTS[n](quick) for n in names}
    with broker(console.print) as facts, RichProgress(*cols, console=console) as bar:
        doc["machine"] = machine(facts)
        import os

        bootstrap = os.environ["HASTREAM_BOOTSTRAP"]
        task = bar.add_task("starting", total=sum(len(p) for p in plans.values()))
        for name, configs in plans.items():
            t0 = time.monotonic()
            runs: list[dict[str, Any]] = []
            for c in configs:
                bar.update(task, description=f"{name}: {c.label}")
                runs.append(_one(c, bootstrap, bar.console.print))
                bar.advance(task)
            doc["experiments"][name] = {
                "quick": quick,
                "runs": runs,
                "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "elapsed_s": round(time.monotonic() - t0, 1),
            }
            save(doc)
            bar.console.print(f"[green]{name}[/] done in {time.monotonic() - t0:.0f} s")


def _one(c: Config, bootstrap: str, say: Any) -> dict[str, Any]:
    try:
        r = run(c, bootstrap)
    except Exception as e:  # noqa: BLE001 - one failed run must not lose the others
        say(f"[red]{c.label} failed:[/] {type(e).__name__}: {e}")
        return {"config": c.__dict__, "label": c.label, "error": f"{type(e).__name__}: {e}"}
    say(
        f"{c.label}: recovery {r['recovery_ms']} ms, outage {r['outage_s']:.2f} s, overhead {r['overhead_pct']} %, "
        f"{_guarantee(r)}"
    )
    return r


# -- figures --------------------------------------------------------------------------
COLOURS = {"passive_standby": "#2a7ab9", "active_standby": "#e08a2c", "upstream_backup": "#3a9a4a"}


def plot(doc: dict[str, Any]) -> list[Path]:
    out = []
    m = doc.get("machine", {})
    for name, xkey, title in (
        ("interval", "interval_ms", "Fig. 6: recovery time against overhead as the interval M sweeps"),
        ("chain", "aggregates", "Fig. 7: recovery time against overhead for chains of aggregates"),
    ):
        e = doc["experiments"].get(name)
        if not e:
            continue
        plt = pyplot()
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
        for s, rec in [(s, "precise") for s in ex.SCHEMES] + [(s, "rollback") for s in ex.ROLLBACK]:
            rs = sorted(
                (r for r in e["runs"] if "error" not in r and r["config"]["scheme"] == s and _recovery(r) == rec),
                key=lambda r: r["config"][xkey],
            )
            if not rs:
                continue
            rollback = rec == "rollback"
            kw = {
                "color": COLOURS[s],
                "marker": "x" if rollback else "o",
                "linestyle": "--" if rollback else "-",
                "label": f"{ex.SHORT[s]} {rec}",
            }
            a.plot([r["overhead_pct"] for r in rs], [r["recovery_ms"] for r in rs], **kw)
            for r in rs:
                a.annotate(f"{r['config'][xkey]}", (r["overhead_pct"], r["recovery_ms"]), fontsize=7)
            b.plot([r["config"][xkey] for r in rs], [1000 * r["outage_s"] for r in rs], **kw)
        a.set_xlabel("HA overhead (% of the data bytes)")
        a.set_ylabel("recovery time (ms)")
        a.set_title(
            f"recovery vs overhead (labels: {'M in ms' if xkey == 'interval_ms' else 'aggregates'})", fontsize=9
        )
        b.set_xlabel("interval M (ms)" if xkey == "interval_ms" else "aggregates in the chain")
        b.set_ylabel("outage a client sees: detection + recovery (ms)")
        b.set_title("outage after kill -9", fontsize=9)
        for ax in (a, b):
            ax.legend(fontsize=7)
        full = f"{title}{' (quick run)' if e.get('quick') else ''}\n{footer(m)}"
        out.append(save_figure(fig, DOCS / f"ha_{name}.png", full))
    return out


# -- the page ---------------------------------------------------------------------------
def _ms(v: Any) -> str:
    return f"{v:.0f}" if isinstance(v, (int, float)) else "–"


def _pct(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, (int, float)) else "–"


def _runs(doc: dict[str, Any], name: str) -> list[dict[str, Any]]:
    e = doc["experiments"].get(name) or {}
    return [r for r in e.get("runs", []) if "error" not in r]


def _find(runs: list[dict[str, Any]], **cfg: Any) -> dict[str, Any]:
    """The first precise (or amnesia) run with ``cfg``."""
    return next(
        (r for r in runs if _recovery(r) != "rollback" and all(r["config"][k] == v for k, v in cfg.items())), {}
    )


def _recovery(r: dict[str, Any]) -> str:
    return "gap" if r["config"]["scheme"] == "amnesia" else r["config"].get("recovery", "precise")


def _guarantee(r: dict[str, Any]) -> str:
    """What the run's output log shows: precise, repeating with k duplicates, or neither."""
    if r["precise"]:
        return "precise"
    dups = r.get("duplicates")
    if _recovery(r) == "rollback" and dups is not None and r.get("client_exact", r["precise"]):
        return f"repeating, {dups} duplicate{'' if dups == 1 else 's'}"
    return "gap" if _recovery(r) == "gap" else "NOT precise"


def _precise(runs: list[dict[str, Any]]) -> str:
    ok = sum(r["precise"] for r in runs if _recovery(r) == "precise")
    n = sum(1 for r in runs if _recovery(r) == "precise")
    return f"{ok} of {n}"


def table_interval(doc: dict[str, Any]) -> str:
    runs = _runs(doc, "interval")
    rows = []
    for s, rec in [(s, "precise") for s in ex.SCHEMES] + [(s, "rollback") for s in ex.ROLLBACK]:
        mine = (r for r in runs if r["config"]["scheme"] == s and _recovery(r) == rec)
        for r in sorted(mine, key=lambda r: r["config"]["interval_ms"]):
            rows.append(
                [
                    f"{ex.SHORT[s]} {rec}",
                    r["config"]["interval_ms"],
                    _pct(r["overhead_pct"]),
                    _pct(ex.cpu_overhead(r, runs)),
                    _ms(r["recovery_ms"]),
                    _ms(1000 * r["detection_s"]),
                    _ms(1000 * r["outage_s"]),
                    _guarantee(r),
                ]
            )
    return md_table(
        [
            "scheme",
            "M (ms)",
            "overhead (% bytes)",
            "overhead (% CPU)",
            "recovery (ms)",
            "detection (ms)",
            "outage (ms)",
            "the output log",
        ],
        rows,
    )


def table_classes(doc: dict[str, Any]) -> str:
    runs = _runs(doc, "classes")
    rows = []
    for w in ("filter", "aggregate", "union"):
        p = ex.PAPER_T6[w]
        paper = {"upstream_backup": p[0:2], "active_standby": p[2:4], "passive_standby": p[4:6]}
        row: list[Any] = [w]
        for s, (bw, rec) in paper.items():
            r = _find(runs, workload=w, scheme=s)
            row += [f"{_pct(r.get('overhead_pct'))} ({bw})", f"{_ms(r.get('recovery_ms'))} ({rec})"]
        rows.append(row)
    return md_table(["workload", "UB bw %", "UB rec ms", "AS bw %", "AS rec ms", "PS bw %", "PS rec ms"], rows)


def table_by(doc: dict[str, Any], name: str, key: str, paper: dict[int, tuple[float, float, float]]) -> str:
    runs = _runs(doc, name)
    rows = []
    for v in sorted({r["config"][key] for r in runs}):
        ps, ub = (
            _find(runs, **{key: v, "scheme": "passive_standby"}),
            _find(runs, **{key: v, "scheme": "upstream_backup"}),
        )
        p = paper.get(v, (None, None, None))
        rows.append(
            [
                v,
                f"{_pct(ps.get('overhead_pct'))} ({_pct(p[0])})",
                f"{_ms(ps.get('recovery_ms'))} ({_ms(p[1])})",
                f"{_ms(ub.get('recovery_ms'))} ({_ms(p[2])})",
            ]
        )
    return md_table([key + " (tuples)", "PS overhead % (paper)", "PS rec ms (paper)", "UB rec ms (paper)"], rows)


def table_chain(doc: dict[str, Any]) -> str:
    runs = _runs(doc, "chain")
    rows = []
    for k in sorted({r["config"]["aggregates"] for r in runs}):
        row: list[Any] = [k]
        for s in ex.SCHEMES:
            r = _find(runs, aggregates=k, scheme=s)
            row += [_pct(r.get("overhead_pct")), _ms(r.get("recovery_ms"))]
        rows.append(row)
    return md_table(["aggregates", "PS bw %", "PS rec ms", "AS bw %", "AS rec ms", "UB bw %", "UB rec ms"], rows)


def table_keys(doc: dict[str, Any]) -> str:
    runs = _runs(doc, "keys")
    rows = []
    for k in sorted({r["config"].get("sensors", 1) for r in runs}):
        r = _find(runs, sensors=k, scheme="passive_standby")
        image = r.get("image_bytes")
        rows.append(
            [
                k,
                f"{image / 1000:.1f}" if isinstance(image, int) else "–",
                _pct(r.get("overhead_pct")),
                _pct(r.get("images_only_pct")),
                _pct(ex.cpu_overhead(r, runs)) if r else "–",
                _ms(r.get("recovery_ms")),
                "yes" if r.get("precise") else ("NO" if r else "–"),
            ]
        )
    heads = ["keys", "image (kB)", "PS overhead % (bytes)", "an image every M (%)", "PS overhead % (CPU)"]
    return md_table([*heads, "PS rec ms", "precise"], rows)


def write_page(doc: dict[str, Any]) -> Path:
    m = doc.get("machine", {})
    parts = [fill(PAGE, "intro", machine=footer(m))]
    for name, table in (
        ("interval", table_interval),
        ("classes", table_classes),
        ("window", lambda d: table_by(d, "window", "window", ex.PAPER_T7)),
        ("advance", lambda d: table_by(d, "advance", "advance", ex.PAPER_T8)),
        ("chain", table_chain),
        ("keys", table_keys),
    ):
        e = doc["experiments"].get(name)
        if not e:
            continue
        head = fill(
            PAGE,
            "run",
            mode="quick" if e.get("quick") else "full",
            date=e.get("date", "?"),
            elapsed=e.get("elapsed_s", "?"),
        )
        parts.append(fill(PAGE, name, table=table(doc), precise=_precise(_runs(doc, name)), run=head))
    outages = [1000 * r["outage_s"] for e in doc["experiments"] for r in _runs(doc, e)]
    if outages:
        parts.insert(1, fill(PAGE, "kstreams", low=f"{min(outages):.0f}", high=f"{max(outages):.0f}"))
    path = DOCS / "ha.md"
    path.write_text("\n\n".join(parts) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.getLogger("hastream.librdkafka").setLevel(logging.ERROR)
    doc = load()
    doc.setdefault("experiments", {})
    t0 = time.monotonic()
    if not args.replot:
        run_all(args.names, args.quick, doc)
    figures = plot(doc)
    page = write_page(doc)
    console.print(
        f"results: {RESULTS.relative_to(REPO_ROOT)}; page: {page.relative_to(REPO_ROOT)}; {len(figures)} figures"
        + ("" if args.replot else f"; {time.monotonic() - t0:.0f} s in all")
    )


if __name__ == "__main__":
    main()
