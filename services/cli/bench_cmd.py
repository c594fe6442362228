"""``hastream bench``: the benchmarks that reproduce published experiments on a real broker."""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.common import fail

bench_app = typer.Typer(
    name="bench",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Run benchmarks that reproduce published experiments (results in bench/results/, figures in docs/).",
)


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
    from bench.borealis.__main__ import EXPERIMENTS, main

    names = [n.strip() for n in (only or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise fail(f"unknown experiment(s) {', '.join(unknown)} (known: {', '.join(EXPERIMENTS)})")
    main(
        (["--quick"] if quick else [])
        + (["--only", ",".join(names)] if names else [])
        + (["--replot"] if replot else [])
    )
