"""Run the HA paper's evaluation on hastream, keep the numbers, draw the figures, write docs/ha.md.

    python -m bench.ha [--quick] [--repeats N] [--only NAME[,NAME]] [--replot]
    hastream bench ha [--quick] [--repeats N] [--only NAME] [--replot]

Every run is a node of two replicas under the coordinator on one broker (``HASTREAM_BOOTSTRAP``,
or an embedded one started here), killed with kill -9 mid-run (``bench.ha.run``); each
configuration runs ``--repeats`` times (``bench.ha.points``: median and spread). Results go to
``bench/results/ha.json`` (``--only`` replaces just those experiments), figures to ``docs/``,
and ``docs/ha.md`` is written from ``docs/templates/ha.md`` and the numbers on file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from bench.borealis.common import DOCS, broker, fill, footer, machine, md_table, pyplot, save_figure
from bench.ha import experiments as ex
from bench.ha.points import Point, failed, find, points, recovery
from bench.ha.run import Config, run
from services.core.paths import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results" / "ha.json"
PAGE = "ha"  # docs/templates/ha.md
console = Console(highlight=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.ha", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer points per experiment (about 10 minutes)")
    ap.add_argument("--repeats", type=int, default=5, help="runs of each configuration (default 5)")
    ap.add_argument("--only", default="", help=f"comma-separated experiments to run ({', '.join(ex.EXPERIMENTS)})")
    ap.add_argument("--replot", action="store_true", help="run nothing: redraw figures and docs from the results file")
    a = ap.parse_args(argv)
    a.names = [n.strip() for n in a.only.split(",") if n.strip()] or list(ex.EXPERIMENTS)
    unknown = [n for n in a.names if n not in ex.EXPERIMENTS]
    if unknown:
        ap.exit(2, f"error: unknown experiment(s) {', '.join(unknown)} (known: {', '.join(ex.EXPERIMENTS)})\n")
    if a.repeats < 1:
        ap.exit(2, "error: --repeats must be 1 or more\n")
    return a


def load() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {"experiments": {}}


def save(doc: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1, default=str) + "\n")


def run_all(names: list[str], quick: bool, repeats: int, doc: dict[str, Any]) -> None:
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
        bootstrap = os.environ["HASTREAM_BOOTSTRAP"]
        task = bar.add_task("starting", total=repeats * sum(len(p) for p in plans.values()))
        for name, configs in plans.items():
            t0 = time.monotonic()
            runs: list[dict[str, Any]] = []
            for k in range(repeats):  # round by round: a drift of the machine touches every configuration alike
                for c in configs:
                    bar.update(task, description=f"{name} {k + 1}/{repeats}: {c.label}")
                    runs.append({**_one(c, bootstrap, bar.console.print), "repeat": k})
                    bar.advance(task)
            doc["experiments"][name] = {
                "quick": quick,
                "repeats": repeats,
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
        f"{c.label}: recovery {r['recovery_ms']} ms, client outage {r['outage_s']} s, overhead {r['overhead_pct']} %, "
        f"{Point(r['config'], [r]).guarantee()}"
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
        pts = points(e["runs"])
        for s, rec in [(s, "precise") for s in ex.SCHEMES] + [(s, "rollback") for s in ex.ROLLBACK]:
            ps = sorted(
                (p for p in pts if p.config["scheme"] == s and recovery(p.config) == rec),
                key=lambda p: p.config[xkey],
            )
            if not ps:
                continue
            rollback = rec == "rollback"
            kw = {
                "color": COLOURS[s],
                "marker": "x" if rollback else "o",
                "linestyle": "--" if rollback else "-",
                "label": f"{ex.SHORT[s]} {rec}",
                "capsize": 2,
            }
            xs = [p.median("overhead_pct") for p in ps]
            a.errorbar(xs, *_bars(ps, "recovery_ms"), **kw)
            for p, x in zip(ps, xs, strict=True):
                a.annotate(f"{p.config[xkey]}", (x, p.median("recovery_ms")), fontsize=7)
            b.errorbar([p.config[xkey] for p in ps], *_bars(ps, "outage_s", 1000), **kw)
        a.set_xlabel("HA overhead (% of the data bytes)")
        a.set_ylabel("recovery time (ms), from the election")
        a.set_title(
            f"recovery vs overhead (labels: {'M in ms' if xkey == 'interval_ms' else 'aggregates'})", fontsize=9
        )
        b.set_xlabel("interval M (ms)" if xkey == "interval_ms" else "aggregates in the chain")
        b.set_ylabel("outage at a client after kill -9 (ms)")
        b.set_title(f"median of {e.get('repeats', 1)} runs, bars: their range", fontsize=9)
        for ax in (a, b):
            ax.legend(fontsize=7)
        full = f"{title}{' (quick run)' if e.get('quick') else ''}\n{footer(m)}"
        out.append(save_figure(fig, DOCS / f"ha_{name}.png", full))
    return out


def _bars(ps: list[Point], key: str, scale: float = 1.0) -> tuple[list[float], list[list[float]]]:
    """Medians of ``key`` and their distances to the runs' minimum and maximum, for ``errorbar``."""
    med = [p.median(key, scale) or 0.0 for p in ps]
    spread = [p.spread(key, scale) or (m, m) for p, m in zip(ps, med, strict=True)]
    return med, [
        [m - lo for m, (lo, _) in zip(med, spread, strict=True)],
        [hi - m for m, (_, hi) in zip(med, spread, strict=True)],
    ]


# -- the page ---------------------------------------------------------------------------
def _pts(doc: dict[str, Any], name: str) -> list[Point]:
    return points((doc["experiments"].get(name) or {}).get("runs", []))


def _precise(pts: list[Point]) -> str:
    runs = [r for p in pts if recovery(p.config) == "precise" for r in p.runs]
    return f"{sum(r['precise'] for r in runs)} of {len(runs)}"


def _kb(p: Point) -> str:
    return p.cell("input_kept_bytes", 0.001, 1)


def table_interval(doc: dict[str, Any]) -> str:
    pts = _pts(doc, "interval")
    rows = []
    for s, rec in [(s, "precise") for s in ex.SCHEMES] + [(s, "rollback") for s in ex.ROLLBACK]:
        mine = (p for p in pts if p.config["scheme"] == s and recovery(p.config) == rec)
        for p in sorted(mine, key=lambda p: p.config["interval_ms"]):
            rows.append(
                [
                    f"{ex.SHORT[s]} {rec}",
                    p.config["interval_ms"],
                    p.cell("overhead_pct", digits=1),
                    p.cell("cpu_pct"),
                    p.cell("recovery_ms"),
                    p.cell("detection_s", 1000),
                    p.cell("outage_s", 1000),
                    _kb(p),
                    p.guarantee(),
                ]
            )
    heads = ["scheme", "M (ms)", "overhead (% bytes)", "overhead (% CPU)", "recovery (ms)", "detection (ms)"]
    return md_table([*heads, "client outage (ms)", "input kept (kB)", "the output log"], rows)


def table_classes(doc: dict[str, Any]) -> str:
    pts = _pts(doc, "classes")
    rows = []
    for w in ("filter", "aggregate", "union"):
        p = ex.PAPER_T6[w]
        paper = {"upstream_backup": p[0:2], "active_standby": p[2:4], "passive_standby": p[4:6]}
        row: list[Any] = [w]
        for s, (bw, rec) in paper.items():
            q = find(pts, workload=w, scheme=s)
            row += [f"{q.cell('overhead_pct', digits=1)} ({bw})", f"{q.cell('recovery_ms')} ({rec})"]
        rows.append(row)
    return md_table(["workload", "UB bw %", "UB rec ms", "AS bw %", "AS rec ms", "PS bw %", "PS rec ms"], rows)


def table_by(doc: dict[str, Any], name: str, key: str, paper: dict[int, tuple[float, float, float]]) -> str:
    pts = _pts(doc, name)
    rows = []
    for v in sorted({p.config[key] for p in pts}):
        ps, ub = find(pts, **{key: v, "scheme": "passive_standby"}), find(pts, **{key: v, "scheme": "upstream_backup"})
        want = paper.get(v, (None, None, None))
        rows.append(
            [
                v,
                f"{ps.cell('overhead_pct', digits=1)} ({_num(want[0], 1)})",
                f"{ps.cell('recovery_ms')} ({_num(want[1])})",
                f"{ub.cell('recovery_ms')} ({_num(want[2])})",
                f"{_kb(ps)} / {_kb(ub)}",
            ]
        )
    heads = [key + " (tuples)", "PS overhead % (paper)", "PS rec ms (paper)", "UB rec ms (paper)"]
    return md_table([*heads, "input kept kB (PS / UB)"], rows)


def _num(v: Any, digits: int = 0) -> str:
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) else "–"


def table_chain(doc: dict[str, Any]) -> str:
    pts = _pts(doc, "chain")
    rows = []
    for k in sorted({p.config["aggregates"] for p in pts}):
        row: list[Any] = [k]
        for s in ex.SCHEMES:
            q = find(pts, aggregates=k, scheme=s)
            row += [q.cell("overhead_pct", digits=1), q.cell("recovery_ms")]
        rows.append(row)
    return md_table(["aggregates", "PS bw %", "PS rec ms", "AS bw %", "AS rec ms", "UB bw %", "UB rec ms"], rows)


def table_keys(doc: dict[str, Any]) -> str:
    pts = _pts(doc, "keys")
    rows = []
    for k in sorted({p.config.get("sensors", 1) for p in pts}):
        q = find(pts, sensors=k, scheme="passive_standby")
        rows.append(
            [
                k,
                q.cell("image_bytes", 0.001, 1),
                q.cell("overhead_pct", digits=1),
                q.cell("images_only_pct", digits=1),
                q.cell("cpu_pct"),
                q.cell("recovery_ms"),
                q.guarantee() if q else "–",
            ]
        )
    heads = ["keys", "image (kB)", "PS overhead % (bytes)", "an image every M (%)", "PS overhead % (CPU)"]
    return md_table([*heads, "PS rec ms", "the output log"], rows)


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
            repeats=e.get("repeats", 1),
            failed=failed(e["runs"]),
            date=e.get("date", "?"),
            elapsed=e.get("elapsed_s", "?"),
        )
        parts.append(fill(PAGE, name, table=table(doc), precise=_precise(_pts(doc, name)), run=head))
    outages = [  # amnesia's gap is what it loses by design (the windows open at the kill), no outage
        1000 * v
        for e in doc["experiments"]
        for p in _pts(doc, e)
        if p.config.get("scheme") != "amnesia"
        for v in p.values("outage_s")
    ]
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
        run_all(args.names, args.quick, args.repeats, doc)
    figures = plot(doc)
    page = write_page(doc)
    console.print(
        f"results: {RESULTS.relative_to(REPO_ROOT)}; page: {page.relative_to(REPO_ROOT)}; {len(figures)} figures"
        + ("" if args.replot else f"; {time.monotonic() - t0:.0f} s in all")
    )


if __name__ == "__main__":
    main()
