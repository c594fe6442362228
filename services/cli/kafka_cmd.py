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
        int | None,
        typer.Option(
            "--brokers", "-n", min=1, max=9, help="Brokers of a new cluster (3 gives a 3-voter quorum; default 1)."
        ),
    ] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Delete the cluster in the data dir (topics and data) and start a new one.")
    ] = False,
    dir: DirOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the brokers to be ready.")] = 120,
    sasl: Annotated[
        bool,
        typer.Option(
            "--sasl",
            envvar="HASTREAM_SASL",
            help="A new cluster takes SASL/SCRAM-SHA-512 logins and enforces ACLs; its admin login is kept in "
            "the data dir (admin.json, mode 0600).",
        ),
    ] = False,
) -> None:
    """Start the cluster detached and print its bootstrap servers: a stopped or crashed one resumes
    on its ports with its data; --fresh deletes it and starts a new, empty one."""
    data_dir = _data_dir(dir)
    cluster = _existing(data_dir)
    if cluster is not None and sasl and not cluster.sasl and not fresh:
        raise fail(
            f"the Kafka cluster in {data_dir} runs without SASL: start it without --sasl, "
            "or delete it and start a new one with --fresh --sasl"
        )
    if cluster is not None and all(cluster.alive()) and not fresh:
        out.print(f"Kafka is already running in {data_dir}")
        out.print(cluster.bootstrap)
        return
    cluster = _to_start(cluster, data_dir, brokers, fresh, sasl)
    try:
        with err.status(f"starting {cluster.brokers} Kafka {KAFKA_VERSION} broker(s) in {data_dir} ..."):
            cluster.start(timeout=timeout, detach=True, fresh=fresh)
    except KafkaClusterError as exc:
        raise fail(str(exc), 1) from None
    except KeyboardInterrupt:
        raise fail("interrupted; brokers stopped", 130) from None
    out.print(f"Kafka {KAFKA_VERSION} running: {cluster.brokers} broker(s), pids {cluster.pids}, data in {data_dir}")
    if cluster.sasl:
        out.print(f"SASL/SCRAM-SHA-512 logins and ACLs: the admin login is in {cluster.admin_file}")
    out.print(cluster.bootstrap)


def _to_start(
    cluster: KafkaCluster | None, data_dir: Path, brokers: int | None, fresh: bool, sasl: bool
) -> KafkaCluster:
    """The cluster ``start`` launches, after saying in one line whether it resumes or deletes one."""
    stored = cluster is not None and cluster.stored()
    if cluster is not None and stored and not fresh:
        if brokers is not None and brokers != cluster.brokers:
            raise fail(
                f"the Kafka cluster in {data_dir} has {cluster.brokers} broker(s): start it without --brokers, "
                f"or delete it and start a new one with --fresh --brokers {brokers}"
            )
        out.print(
            f"resuming the Kafka cluster in {data_dir} on {cluster.bootstrap} (its data is kept; --fresh for a new one)"
        )
        return cluster
    if cluster is not None and fresh:
        if cluster.is_running():
            raise fail(f"the Kafka cluster in {data_dir} is running: stop it first with 'hastream kafka stop'")
        if stored:
            out.print(
                f"--fresh: deleting the Kafka cluster in {data_dir} (was {cluster.bootstrap}, with all its topics)"
            )
    return KafkaCluster(brokers=brokers or 1, data_dir=data_dir, sasl=sasl)


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
    if cluster.sasl:
        out.print(f"logins: SASL/SCRAM-SHA-512, ACLs enforced; admin login in {cluster.admin_file}")
    brokers = ", ".join(
        f"{i}: pid {pid}" if up else f"{i}: down" for i, (pid, up) in enumerate(zip(cluster.pids, alive, strict=True))
    )
    out.print(f"brokers: {brokers}")
    out.print(f"data dir: {data_dir}")
