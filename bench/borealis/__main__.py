"""Run the Borealis experiments, keep their numbers, draw their figures, write docs/experiments.md.

    python -m bench.borealis [--quick] [--only NAME[,NAME]] [--replot]
    hastream bench borealis [--quick] [--only NAME] [--replot]

Every experiment runs on one broker (``HASTREAM_BOOTSTRAP``, or an embedded one started here).
Results go to ``bench/results/borealis.json``, one entry per experiment (``--only`` replaces just
those entries), figures to ``docs/``, and ``docs/experiments.md`` is regenerated from the
experiments' ``section()`` texts and the JSON, so the page always shows the numbers on file.
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

from bench.borealis.common import DOCS, RESULTS, Progress, broker, machine
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


INTRO = """# Experiments: the Borealis DPC evaluation on hastream

<!-- Generated by `hastream bench borealis` from bench/results/borealis.json: edit
bench/borealis/*.py, not this file. -->

These experiments repeat the evaluation of Balazinska et al., *Fault-tolerance in the Borealis
distributed stream processing system* (SIGMOD 2005, section 7), on hastream: every node replica
and the coordinator is a real process, every stream a Kafka topic on a real broker, faults are
real (an input held back, `kill -9`). Each section shows the paper's statement, our numbers, and
why they differ.

```
hastream bench borealis --quick              # a few minutes: a reduced version of each experiment
hastream bench borealis                      # the full set (about 35 minutes on 2 cores)
hastream bench borealis --only chain         # one experiment; the others stay as they are on file
hastream bench borealis --replot             # redraw figures and this page from the results file
```

**Definitions** (the same for every section).

- **The client** is a `StreamView` on the output of the last node: it follows the best replica
  (STABLE over UPSTREAM_FAILURE over STABILIZATION), switches when that changes, and applies
  UNDO, as an application would. It stamps each event with the time its poll returned (polls
  every 20 ms).
- **Delay_new** is the maximum, over *new* input tuples, of the time from the tuple's generation
  (when the paced source produced it, before any hold) to the client's first receipt of any
  version of its output tuple, stable or tentative. Each output tuple of the pass-through chain
  comes from exactly one input tuple (same `sensor` = input, same `seq`), so this is exact per
  tuple. Not new: tuples of the failed input generated while it was cut off (they arrive when the
  failure heals whatever the system does), and the first second of the run (warm-up: the first
  fetches of every consumer). Also reported: the p99 of the same delays.
- **N_tentative** is the number of TENTATIVE tuples the client received, as the paper counts
  them at the client application. When the client switches replica it drops the tentative
  tuples it holds and reads the new replica's own tentative version, so a tuple can arrive
  tentatively twice; the JSON also has `tentative_unique`, the distinct tuples received
  tentatively (dashed lines in the chain figure).
- **Eventually consistent** means: once the workload ended, the final stable output of *every*
  replica of *every* node, and the client's stable sequence, equal the expected output tuple for
  tuple (the inputs merged in SUnion order: tuple time, then input, then id), and no stable tuple
  was ever undone. A run that fails this says **NO** in its table and gets a red x in its figure.

**Common setup.** Inputs s1, s2, s3, one partition each, {rate} tuples/s per input ({agg}
aggregate), event time advancing 1000/rate ms per tuple, a BOUNDARY after every batch; SUnion
buckets of 100 ms; heartbeats every 100 ms, failure timeout 800 ms; checkpoints every 1 s;
checkpoint/redo reconciliation; α = 0.9. The paper used a join with a state of 100 tuples and a
higher aggregate rate; our nodes are stateless (union, filter, map), so the work a
reconciliation redoes is SUnion's buffered input, and the rate is what 2 cores sustain with up to
9 Python processes, a JVM broker and the harness without the machine itself becoming the
bottleneck. Every point is one run (the paper averages at least three).

**Machine.** {machine}

**Our copy of the paper** has lost its digits (every number reads "1"), so the paper's figures
are quoted by their statements, and numbers only where the project page gives them (a 15 s
failure, chains of 1 to 4 nodes with two replicas each, X = 3 s per node).
"""


def machine_line(m: dict[str, Any]) -> str:
    return (
        f"{m.get('cores')} cores, {m.get('cpu')}; {m.get('platform')}; Python {m.get('python')}, "
        f"confluent-kafka {m.get('confluent_kafka')} (librdkafka {m.get('librdkafka')}); "
        f"Kafka {m.get('kafka')}, {m.get('broker')}."
    )


def write_docs(doc: dict[str, Any]) -> Path:
    """docs/experiments.md: the fixed introduction, then each experiment's section, in order."""
    exps = doc.get("experiments", {})
    rate = next((r["config"]["rate"] for e in exps.values() for r in e.get("runs", []) if "config" in r), 100)
    machines = {name: machine_line(e.get("machine") or doc.get("machine", {})) for name, e in exps.items()}
    several = len(set(machines.values())) > 1
    intro_machine = (
        "The sections ran on different machines of the same size; each states its own."
        if several
        else next(iter(machines.values()), machine_line(doc.get("machine", {})))
    )
    parts = [INTRO.format(rate=rate, agg=3 * rate, machine=intro_machine)]
    for name in EXPERIMENTS:
        result, mod = exps.get(name), module(name)
        if result is None or mod is None:
            continue
        mode = "quick" if result.get("quick") else "full"
        head = f"<!-- {name}: {mode} run of {result.get('date', '?')}, {result.get('elapsed_s', '?')} s -->\n"
        if "error" in result:
            parts.append(head + f"## {name}\n\nThe experiment failed: {result['error']}\n")
            continue
        try:
            text = mod.section(result).strip()
            if several:  # under the section's heading
                title, _, rest = text.partition("\n")
                text = f"{title}\n\n*Machine: {machines[name]}*\n{rest}"
            parts.append(head + text + "\n")
        except Exception as e:  # noqa: BLE001
            parts.append(
                head + f"## {name}\n\nThe experiment's section could not be written: {type(e).__name__}: {e}\n"
            )
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
