"""Run the Borealis experiments, keep their numbers, draw their figures, write docs/experiments.md.

    python -m bench.borealis [--quick] [--only NAME[,NAME]] [--replot]
    hastream bench borealis [--quick] [--only NAME] [--replot]

Every experiment runs on one broker (``HASTREAM_BOOTSTRAP``, or an embedded one started here).
Results go to ``bench/results/borealis.json``, one entry per experiment (``--only`` replaces just
those entries), figures to ``docs/``, and ``docs/experiments.md`` is regenerated from the
experiments' ``section()`` texts (their prose in ``docs/templates/``) and the JSON, so the page
always shows the numbers on file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.util
import json
import logging
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from bench.borealis.common import DOCS, RESULTS, Progress, broker, fill, machine
from services.core.paths import REPO_ROOT

# name -> module; order is the order of docs/experiments.md
EXPERIMENTS = {
    "chain": "bench.borealis.chain_length",
    "single": "bench.borealis.single_node",
    "kill": "bench.borealis.node_kill",
    "reconcile": "bench.borealis.reconcile",
    "overhead": "bench.borealis.overhead",
    "failover": "bench.borealis.failover",
}
MORE = "<!-- more experiments -->"
PAGE = "experiments"  # docs/templates/experiments.md: the page around the sections

console = Console(highlight=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.borealis", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small version of every experiment (a few minutes)")
    ap.add_argument("--only", default="", help=f"comma-separated experiments to run ({', '.join(EXPERIMENTS)})")
    ap.add_argument("--replot", action="store_true", help="run nothing: redraw figures and docs from the results file")
    a = ap.parse_args(argv)
    a.names = [n.strip() for n in a.only.split(",") if n.strip()] or list(EXPERIMENTS)
    unknown = [n for n in a.names if n not in EXPERIMENTS]
    if unknown:
        # One line, as every hastream error (``hastream bench borealis`` passes it on).
        ap.exit(2, f"error: unknown experiment(s) {', '.join(unknown)} (known: {', '.join(EXPERIMENTS)})\n")
    return a


def load_results() -> dict[str, Any]:
    if RESULTS.exists():
        return json.loads(RESULTS.read_text())
    return {"experiments": {}}


def save_results(doc: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1, default=str) + "\n")


def module(name: str) -> Any | None:
    """The experiment's module, or None if it does not exist (yet)."""
    mod = EXPERIMENTS[name]
    if importlib.util.find_spec(mod) is None:
        return None
    return importlib.import_module(mod)


def run_experiments(names: list[str], quick: bool, doc: dict[str, Any]) -> None:
    """Run ``names`` on one broker, saving the results file after each so a crash loses one experiment at most."""
    cols = (
        SpinnerColumn(),
        TextColumn("{task.description:<44}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with broker(console.print) as facts:
        m = machine(facts)
        doc["machine"] = m
        with RichProgress(*cols, console=console) as bar:
            task = bar.add_task("starting", total=None)
            progress = Progress(lambda **kw: bar.update(task, **kw), bar.console.print)
            for name in names:
                mod = module(name)
                if mod is None:
                    bar.console.print(f"[yellow]skipped[/] {name}: {EXPERIMENTS[name]} does not exist")
                    continue
                t0 = time.monotonic()
                try:
                    result = mod.run(quick, progress)
                except Exception as e:  # noqa: BLE001 - one broken experiment must not lose the others
                    bar.console.print(f"[red]{name} failed:[/] {type(e).__name__}: {e}")
                    result = {"error": f"{type(e).__name__}: {e}"}
                result.setdefault("quick", quick)
                result.update(
                    machine=m,
                    date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    elapsed_s=round(time.monotonic() - t0, 1),
                )
                doc["experiments"][name] = result
                save_results(doc)
                draw([name], doc)
                bar.console.print(f"[green]{name}[/] done in {result['elapsed_s']:.0f} s")


def draw(names: list[str], doc: dict[str, Any]) -> list[Path]:
    """Figures of ``names`` from the results on file (a plotting bug costs a figure, not the run)."""
    out: list[Path] = []
    for name in names:
        result, mod = doc["experiments"].get(name), module(name)
        if result is None or mod is None or "error" in result:  # a failed experiment has nothing to draw
            continue
        try:
            out += mod.plot(result, DOCS)
        except Exception as e:  # noqa: BLE001
            console.print(f"[red]plot of {name} failed:[/] {type(e).__name__}: {e}")
    return out


def machine_line(m: dict[str, Any]) -> str:
    keys = ("cores", "cpu", "platform", "python", "confluent_kafka", "librdkafka", "kafka", "broker")
    return fill(PAGE, "machine", **{k: m.get(k) for k in keys})


def write_docs(doc: dict[str, Any]) -> Path:
    """docs/experiments.md: the introduction, then each experiment's section, in order (the page's own
    text is ``docs/templates/experiments.md``)."""
    exps = doc.get("experiments", {})
    rate = next((r["config"]["rate"] for e in exps.values() for r in e.get("runs", []) if "config" in r), 100)
    machines = {name: machine_line(e.get("machine") or doc.get("machine", {})) for name, e in exps.items()}
    several = len(set(machines.values())) > 1
    intro_machine = (
        fill(PAGE, "machines-differ")
        if several
        else next(iter(machines.values()), machine_line(doc.get("machine", {})))
    )
    parts = [fill(PAGE, "intro", rate=rate, agg=3 * rate, machine=intro_machine) + "\n"]
    for name in EXPERIMENTS:
        result, mod = exps.get(name), module(name)
        if result is None or mod is None:
            continue
        mode = "quick" if result.get("quick") else "full"
        head = fill(
            PAGE, "run", name=name, mode=mode, date=result.get("date", "?"), elapsed=result.get("elapsed_s", "?")
        )
        head += "\n"
        if "error" in result:
            parts.append(head + fill(PAGE, "failed", name=name, error=result["error"]) + "\n")
            continue
        try:
            text = mod.section(result).strip()
            if several:  # under the section's heading
                title, _, rest = text.partition("\n")
                text = f"{title}\n\n{fill(PAGE, 'section-machine', machine=machines[name])}\n{rest}"
            parts.append(head + text + "\n")
        except Exception as e:  # noqa: BLE001
            parts.append(head + fill(PAGE, "unwritable", name=name, error=f"{type(e).__name__}: {e}") + "\n")
    parts.append(MORE + "\n")
    path = DOCS / "experiments.md"
    path.write_text("\n".join(parts))
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.getLogger("hastream.librdkafka").setLevel(logging.ERROR)
    doc = load_results()
    doc.setdefault("experiments", {})
    t0 = time.monotonic()
    if not args.replot:
        run_experiments(args.names, args.quick, doc)
    figures = draw(list(EXPERIMENTS), doc) if args.replot else []
    page = write_docs(doc)
    for name in args.names:
        r = doc["experiments"].get(name)
        if r is not None:
            bad = [
                x.get("label", "?")
                for k in ("runs", "alpha_x_runs", "duration_runs")
                for x in r.get(k, [])
                if not x.get("consistent", True)
            ]
            if bad:
                console.print(f"[red]{name}: not eventually consistent:[/] {', '.join(bad)}")
    console.print(
        f"results: {RESULTS.relative_to(REPO_ROOT)}; page: {page.relative_to(REPO_ROOT)}"
        + (f"; {len(figures)} figures redrawn" if figures else "")
        + ("" if args.replot else f"; {time.monotonic() - t0:.0f} s in all")
    )
    return doc


if __name__ == "__main__":
    main()
