"""``hastream kafka``: run a local real Kafka cluster in the background, check on it, stop it.

The cluster outlives the command (the broker JVMs are detached), so a demo or a notebook can use
it across many shells; ``cluster.json`` in the data dir is how later commands find it again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from infra.kafka.cluster import KAFKA_VERSION, KafkaCluster, KafkaClusterError
from services.cli.common import err, fail
from services.core.paths import hastream_home

kafka_app = typer.Typer(
    name="kafka",
    help=f"Run a local Apache Kafka {KAFKA_VERSION} cluster (KRaft, no Docker).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# soft_wrap: never fold a bootstrap list or path across lines; scripts read this output.
out = Console(soft_wrap=True, highlight=False, markup=False)

DirOption = Annotated[
    Path | None,
    typer.Option("--dir", help="Cluster data dir (default: $HASTREAM_HOME/kafka).", file_okay=False),
]


def _data_dir(path: Path | None) -> Path:
    return (path if path is not None else hastream_home() / "kafka").expanduser().resolve()


def _existing(data_dir: Path) -> KafkaCluster | None:
    """The cluster recorded in ``data_dir``, or None if there is none (or its state is unreadable)."""
    if not (data_dir / "cluster.json").exists():
        return None
    try:
        return KafkaCluster.load(data_dir)
    except (KafkaClusterError, KeyError, TypeError, ValueError):
        return None


@kafka_app.command()
def start(
    brokers: Annotated[
        int, typer.Option("--brokers", "-n", min=1, max=9, help="Number of brokers (3 gives a 3-voter quorum).")
    ] = 1,
    dir: DirOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the brokers to be ready.")] = 120,
) -> None:
    """Start a detached cluster and print its bootstrap servers (a new, empty cluster each time)."""
    data_dir = _data_dir(dir)
    running = _existing(data_dir)
    if running is not None and running.is_running():
        out.print(f"Kafka is already running in {data_dir}")
        out.print(running.bootstrap)
        return
    try:
        with err.status(f"starting {brokers} Kafka {KAFKA_VERSION} broker(s) in {data_dir} ..."):
            cluster = KafkaCluster(brokers=brokers, data_dir=data_dir).start(timeout=timeout, detach=True)
    except KafkaClusterError as exc:
        raise fail(str(exc), 1) from None
    except KeyboardInterrupt:
        raise fail("interrupted; brokers stopped", 130) from None
    out.print(f"Kafka {KAFKA_VERSION} running: {brokers} broker(s), pids {cluster.pids}, data in {data_dir}")
    out.print(cluster.bootstrap)


@kafka_app.command()
def stop(
    dir: DirOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for a clean shutdown before SIGKILL.")] = 30,
) -> None:
    """Stop the cluster in the data dir (clean shutdown, then SIGKILL after --timeout); data is kept until the next start."""
    data_dir = _data_dir(dir)
    cluster = _existing(data_dir)
    if cluster is None or not cluster.is_running():
        out.print(f"no Kafka cluster running in {data_dir}")
        return
    try:
        cluster.stop(timeout=timeout)
    except (KafkaClusterError, OSError) as exc:
        raise fail(f"could not stop Kafka in {data_dir}: {exc}", 1) from None
    out.print(f"Kafka stopped ({data_dir})")


@kafka_app.command()
def status(dir: DirOption = None) -> None:
    """Say whether the cluster runs, with its bootstrap servers and pids (exit 1 when not running)."""
    data_dir = _data_dir(dir)
    cluster = _existing(data_dir)
    if cluster is None:
        out.print(f"not running (no cluster in {data_dir})")
        raise typer.Exit(1)
    alive = cluster.alive()
    if not any(alive):
        out.print(f"not running (last cluster in {data_dir} was {cluster.bootstrap})")
        raise typer.Exit(1)
    state = "running" if all(alive) else f"degraded ({sum(alive)}/{len(alive)} brokers up)"
    out.print(state)
    out.print(f"bootstrap: {cluster.bootstrap}")
    brokers = ", ".join(
        f"{i}: pid {pid}" if up else f"{i}: down" for i, (pid, up) in enumerate(zip(cluster.pids, alive, strict=True))
    )
    out.print(f"brokers: {brokers}")
    out.print(f"data dir: {data_dir}")
