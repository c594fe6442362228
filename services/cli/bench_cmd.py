"""``hastream bench``: the benchmarks that reproduce published experiments on a real broker.

The benchmarks live in ``bench/`` beside the product, not in it: this command finds that
folder at run time and runs ``python -m bench.borealis`` from the repository root with the
same arguments, passing its exit code on.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from services.cli.common import fail
from services.core.paths import REPO_ROOT

bench_app = typer.Typer(
    name="bench",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Run benchmarks that reproduce published experiments (results in bench/results/, figures in docs/).",
)


def run_bench(module: str, args: list[str]) -> int:
    """Run ``python -m <module> <args>`` from the repository root; its exit code."""
    entry = REPO_ROOT.joinpath(*module.split("."), "__main__.py")
    if not entry.is_file():
        raise fail(f"no benchmarks: {entry.parent} is missing (hastream bench runs from a source checkout with bench/)")
    from services.deploy.processes import run

    return run([sys.executable, "-m", module, *args])


@bench_app.command("borealis")
def borealis(
    quick: Annotated[
        bool, typer.Option("--quick", help="A reduced version of every experiment (a few minutes).")
    ] = False,
    only: Annotated[
        str | None,
        typer.Option(
            "--only", help="Comma-separated experiments to run: chain, single, kill, reconcile, overhead, failover."
        ),
    ] = None,
    replot: Annotated[
        bool,
        typer.Option("--replot", help="Run nothing: redraw the figures and docs/experiments.md from the results file."),
    ] = False,
) -> None:
    """The Borealis DPC evaluation (SIGMOD 2005): Delay_new and N_tentative under input and node failures.

    Starts a 1-broker Kafka (unless $HASTREAM_BOOTSTRAP names one), writes
    bench/results/borealis.json, docs/borealis_*.png and docs/experiments.md.
    """
    args = (["--quick"] if quick else []) + (["--only", only] if only else []) + (["--replot"] if replot else [])
    code = run_bench("bench.borealis", args)
    if code:
        raise typer.Exit(code)


@bench_app.command("ha")
def ha(
    quick: Annotated[bool, typer.Option("--quick", help="Fewer points per experiment (about 10 minutes).")] = False,
    only: Annotated[
        str | None,
        typer.Option(
            "--only", help="Comma-separated experiments to run: interval, classes, window, advance, chain, keys."
        ),
    ] = None,
    repeats: Annotated[
        int, typer.Option("--repeats", min=1, help="Runs of each configuration (median and range).")
    ] = 5,
    replot: Annotated[
        bool, typer.Option("--replot", help="Run nothing: redraw the figures and docs/ha.md from the results file.")
    ] = False,
) -> None:
    """The HA algorithms' evaluation (ICDE 2005): recovery time, a client's outage, overhead and storage
    of amnesia, passive standby, active standby and upstream backup under kill -9, each point the
    median of --repeats runs.

    Starts a 1-broker Kafka (unless $HASTREAM_BOOTSTRAP names one), writes bench/results/ha.json,
    docs/ha_*.png and docs/ha.md.
    """
    args = (["--quick"] if quick else []) + (["--only", only] if only else []) + (["--replot"] if replot else [])
    code = run_bench("bench.ha", [*args, "--repeats", str(repeats)])
    if code:
        raise typer.Exit(code)


@bench_app.command("cec")
def cec(
    quick: Annotated[bool, typer.Option("--quick", help="A tenth of the items and tuples (about a minute).")] = False,
    replot: Annotated[
        bool, typer.Option("--replot", help="Run nothing: redraw the figure and docs/cec.md from the results file.")
    ] = False,
) -> None:
    """CEC's recovery evaluation (Sebeou & Magoutis, Figs. 6 and 7): CEC_CHECK records, extent, EC-load and
    replay bytes against Q and U.

    Starts a 1-broker Kafka (unless $HASTREAM_BOOTSTRAP names one), writes bench/results/cec.json,
    docs/cec.png and docs/cec.md.
    """
    code = run_bench("bench.cec", (["--quick"] if quick else []) + (["--replot"] if replot else []))
    if code:
        raise typer.Exit(code)
