"""``hastream``: validate and deploy query networks, produce to and tail streams, run the demo."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from confluent_kafka import KafkaException
from rich.markup import escape
from rich.table import Table

from services.cli.bench_cmd import bench_app
from services.cli.common import (
    BootstrapOpt,
    SpecArg,
    broker_or_exit,
    cli_logging,
    err,
    fail,
    kafka_error_text,
    out,
    service_logging,
    settings_or_exit,
    spec_or_exit,
    use_deployment_login,
)
from services.cli.coordinator_cmd import coordinator as coordinator_cmd
from services.cli.coordinator_cmd import print_replica_states
from services.cli.egress_cmd import egress
from services.cli.fault_cmd import fault_app
from services.cli.kafka_cmd import kafka_app
from services.cli.source_cmd import source_app
from services.cli.streams_cmd import produce, schema, tail
from services.core.errors import HastreamError
from services.spec import exchanges
from services.spec.classes import describe
from services.spec.egress import egress_topic, egress_topics, egress_units

if TYPE_CHECKING:
    from services.core.config import Settings
    from services.deploy.deployment import Deployment, Process
    from services.spec import Spec

app = typer.Typer(
    name="hastream",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Fault-tolerant, highly available stream processing on Kafka.",
)
app.add_typer(kafka_app, name="kafka")
app.command("coordinator")(coordinator_cmd)
app.add_typer(fault_app, name="fault")
app.add_typer(bench_app, name="bench")
app.add_typer(source_app, name="source")
app.command()(produce)
app.command()(tail)
app.command()(egress)
app.command()(schema)
node_app = typer.Typer(no_args_is_help=True, help="Run one node service process (used by 'up' and docker compose).")
app.add_typer(node_app, name="node")


@app.command()
def validate(
    spec: SpecArg,
    topics: Annotated[
        bool,
        typer.Option(
            "--topics", help="Print each stream's Kafka topics and its egresses' instead, a 'stream topic' line each."
        ),
    ] = False,
) -> None:
    """Check a spec; print every mistake with its file:line:col."""
    s = spec_or_exit(spec)
    if topics:
        for stream in s.streams:
            for t in s.stream_topics(stream):
                print(stream, t)
        for stream, t, _, _ in egress_topics(s):
            print(stream, t)
        for ex in exchanges.edges(s):  # on stderr: stdout stays one 'stream topic' pair a line
            print(f"# {exchanges.describe(s, ex)}", file=sys.stderr)
        return
    out.print(
        f"[green]ok[/] {escape(str(spec))}: {len(s.streams)} streams, {len(s.operators)} operators, "
        f"{len(s.nodes)} nodes; inputs: {', '.join(s.sources())}; outputs: {', '.join(s.sinks())}"
    )
    for n in s.nodes:
        out.print(f"  {escape(describe(s, n))}")
    for ex in exchanges.edges(s):
        out.print(f"  {escape(exchanges.describe(s, ex))}")
    for n, (stream, e) in egress_units(s).items():
        where = egress_topic(s, stream, e)
        out.print(
            f"  {n}: the {e.mode} egress of {stream} to {where} ({e.format}, a commit every {e.commit_ms} ms, "
            f"{e.replicas} replica{'s' if e.replicas > 1 else ''}, one primary per partition)"
        )


@app.command()
def up(
    spec: SpecArg,
    bootstrap: BootstrapOpt = None,
    brokers: Annotated[int, typer.Option(help="Brokers of the embedded cluster, if one is started.")] = 1,
    sasl: Annotated[
        bool | None,
        typer.Option(
            "--sasl/--no-sasl",
            envvar="HASTREAM_SASL",
            show_default=False,
            help="Each service logs in (SASL/SCRAM-SHA-512) as its own user, with ACLs that let it do its work "
            "and nothing else (default: whatever the embedded broker takes; an embedded broker started here gets "
            "SASL with --sasl). With --bootstrap, $HASTREAM_SASL_USERNAME/PASSWORD is the broker's admin login.",
        ),
    ] = None,
) -> None:
    """Deploy: start the embedded broker (unless --bootstrap), create topics, start every service."""
    from services.deploy.local import up as deploy_up

    s = spec_or_exit(spec)
    try:
        dep = deploy_up(s, spec, bootstrap, brokers, sasl)
    except (RuntimeError, OSError, TimeoutError) as e:
        raise fail(str(e)) from None
    out.print(
        f"[green]deployed[/] '{s.name}' on {dep.bootstrap}: {len(dep.processes)} processes; logs in {dep.dir / 'logs'}"
    )
    if dep.sasl:
        out.print(f"each service logs in as its own user; the logins are in {dep.dir / 'credentials.json'}")


@app.command()
def logins(
    spec: SpecArg,
    env_file: Annotated[
        Path, typer.Option("--env-file", help="The file compose reads the passwords from.", dir_okay=False)
    ] = Path(".env"),
) -> None:
    """Write the passwords of compose's SASL option (docker-compose.sasl.yml) to .env, mode 0600: the
    broker admin's and one per service. Those already in the file are kept."""
    from services.deploy import access

    s = spec_or_exit(spec)
    try:
        kept = access.read_env_file(env_file)
        values = access.compose_passwords(s, kept)
        access.write_env_file(env_file, values)
    except (OSError, ValueError) as e:
        raise fail(f"cannot write the logins to {env_file}: {getattr(e, 'strerror', None) or e}") from None
    new = sum(1 for k in values if not kept.get(k))
    out.print(f"{env_file}: {len(values)} logins of '{s.name}' ({new} new), readable by you only")


@app.command()
def down(
    name: Annotated[str | None, typer.Argument(help="Deployment name (default: all).")] = None,
    kafka: Annotated[
        bool,
        typer.Option("--kafka", help="Also stop the embedded broker, unless other running deployments use it."),
    ] = False,
) -> None:
    """Stop a deployment's services (SIGTERM: each flushes and commits)."""
    from services.deploy.local import down as deploy_down

    deps = _deployments(name)
    for d in deps:
        stopped = deploy_down(d)
        out.print(f"stopped '{d.name}': {len(stopped)} processes")
    if kafka:
        _release_brokers(deps)


def _deployments(name: str | None) -> list[Deployment]:
    """The named deployment, or all of them; one line and exit 2 for an unknown name."""
    from services.deploy.deployment import Deployment

    try:
        return [Deployment.load(name)] if name else Deployment.all()
    except LookupError as e:
        raise fail(str(e)) from None


def _release_brokers(deps: list[Deployment]) -> None:
    """Stop the embedded brokers of ``deps``, leaving (with one line) any that other running deployments use."""
    from services.deploy.broker import release_broker

    stopping = {d.name for d in deps}
    for kafka_dir, bootstrap in sorted({(d.kafka_dir, d.bootstrap) for d in deps if d.kafka_dir}):
        users = release_broker(kafka_dir, stopping)
        if users:
            out.print(f"left the Kafka broker at {bootstrap} running: deployment(s) {', '.join(users)} use it")
        else:
            out.print(f"stopped the Kafka broker at {bootstrap} (data kept in {kafka_dir})")


@app.command()
def rm(
    name: Annotated[str, typer.Argument(help="Deployment to remove (stopped).")],
    topics: Annotated[
        bool,
        typer.Option("--topics", help="Also delete its own topics on its broker (never a source's shared 'topic:')."),
    ] = False,
) -> None:
    """Remove a stopped deployment's records: its state, logs and coordinator data (its topics stay
    unless --topics)."""
    from services.deploy.local import remove, remove_topics

    (d,) = _deployments(name)
    try:
        if topics:
            spec = spec_or_exit(Path(d.spec_path))
            use_deployment_login(d.name, d.bootstrap)
            broker_or_exit(d.bootstrap)
            gone = remove_topics(d, spec)
            out.print(f"deleted {len(gone)} topics of '{d.name}' on {d.bootstrap}")
        remove(d)
    except RuntimeError as e:
        raise fail(str(e)) from None
    except KafkaException as e:
        raise fail(f"cannot delete the topics of '{d.name}': {kafka_error_text(e)}") from None
    out.print(f"removed deployment '{d.name}'")


@app.command()
def status(
    name: Annotated[str | None, typer.Argument(help="Deployment name (default: all).")] = None,
    prune: Annotated[bool, typer.Option("--prune", help="Remove the records of stopped deployments first.")] = False,
) -> None:
    """Show each deployment's processes and whether they are alive, and each node replica's DPC state."""
    from services.deploy.local import prune as prune_stopped

    if prune:
        gone = prune_stopped()
        out.print(f"removed {len(gone)} stopped deployment(s)" + (f": {', '.join(gone)}" if gone else ""))
    deps = _deployments(name)
    if not deps:
        out.print("no deployments")
    running = [d for d in deps if d.running()]
    for d in running:
        _print_status(d)
    stopped = [d.name for d in deps if not d.running()]
    if stopped:
        out.print(
            f"stopped: {', '.join(stopped)} (remove with: hastream rm NAME, or all with: hastream status --prune)"
        )


def _print_status(d: Deployment) -> None:
    """A running deployment's process table, then its node replicas' DPC states."""
    from services.cli.common import broker_reachable, deployment_login
    from services.core.login import env_login
    from services.deploy.access import acting_as

    sup = f"supervised (pid {d.supervisor})" if d.supervised() else "[red]no supervisor: crashes stay down[/]"
    t = Table(title=f"{d.name} on {d.bootstrap}", caption=sup if d.processes else None)
    for c in ("service", "pid", "alive", "restarts", "metrics", "log"):
        t.add_column(c)
    for p in d.processes:
        t.add_row(p.role, str(p.pid), _liveness(d, p), str(p.restarts), str(p.metrics_port or "-"), p.log)
    out.print(t)
    if broker_reachable(d.bootstrap):
        with acting_as(None if env_login() else deployment_login(d.name, d.bootstrap)):
            print_replica_states(d)
    else:
        out.print(f"[dim]node replica states unavailable: the Kafka broker at {d.bootstrap} is not reachable[/]")


def _liveness(d: Deployment, p: Process) -> str:
    if d.alive(p):
        return "[green]yes[/]"
    return "[yellow]held[/] (hastream fault restart)" if d.held(p.role) else "[red]no[/]"


@node_app.command("run")
def node_run(
    spec: SpecArg,
    node: Annotated[str, typer.Argument(help="Node name in the spec.")],
    partition: Annotated[int, typer.Option(help="Partition this process owns.")] = 0,
    replica: Annotated[int, typer.Option(help="Replica index of this process.")] = 0,
    process: Annotated[
        int | None, typer.Option(help="Run the partitions process N of the node's 'processes:' hosts, not one.")
    ] = None,
    bootstrap: BootstrapOpt = None,
) -> None:
    """Run one node replica partition (or, with --process, the partitions one process hosts) until SIGTERM."""
    from services.node.loop import NodeService
    from services.schemes import build_scheme

    s = spec_or_exit(spec)
    settings = settings_or_exit(bootstrap)
    if node not in s.nodes:
        raise fail(f"no node '{node}' in {spec} (nodes: {', '.join(s.nodes)})")
    if not 0 <= replica < s.nodes[node].replicas:
        raise fail(f"node '{node}' has replicas 0..{s.nodes[node].replicas - 1}; got --replica {replica}")
    if process is not None:
        return _run_tasks(s, node, process, replica, settings)
    if not 0 <= partition < s.node_partitions(node):
        raise fail(f"node '{node}' has partitions 0..{s.node_partitions(node) - 1}; got --partition {partition}")
    service_logging(f"{node}.r{replica}.p{partition}")
    try:
        stats = NodeService(s, node, partition, replica, settings, build_scheme).run(own_process=True)
    except HastreamError as e:  # e.g. a restart that would renumber its output: say why, in one line
        raise fail(str(e)) from None
    out.print(
        f"node {node} p{partition} r{replica} stopped: consumed {stats.consumed}, produced {stats.produced}, "
        f"dead-lettered {stats.deadlettered}"
    )


def _run_tasks(s: Spec, node: str, process: int, replica: int, settings: Settings) -> None:
    """``node run --process``: the partition tasks of one process (``services.node.tasks``)."""
    from services.node.tasks import PartitionTasks
    from services.schemes import build_scheme

    if not 0 <= process < s.node_processes(node):
        raise fail(f"node '{node}' has processes 0..{s.node_processes(node) - 1}; got --process {process}")
    service_logging(f"{node}.r{replica}.proc{process}")
    try:
        stats = PartitionTasks(s, node, process, replica, settings, build_scheme).run(own_process=True)
    except HastreamError as e:
        raise fail(str(e)) from None
    out.print(
        f"node {node} process {process} r{replica} stopped: consumed {sum(t.consumed for t in stats)}, "
        f"produced {sum(t.produced for t in stats)}, dead-lettered {sum(t.deadlettered for t in stats)}"
    )


@app.command()
def demo(
    seconds: Annotated[float, typer.Option(help="How long to produce the workload.")] = 20,
    rate: Annotated[float, typer.Option(help="Input tuples per second (per source with --faults).")] = 200,
    faults: Annotated[
        bool,
        typer.Option(
            "--faults", help="The replicated chain (examples/chain.yaml) through kill -9 and a stopped source."
        ),
    ] = False,
) -> None:
    """Run the demo pipeline (examples/demo.yaml) on the embedded broker and show what flows out."""
    if faults:
        from services.cli.chain_demo import run_chain_demo

        run_chain_demo(max(seconds, 30), rate if rate != 200 else 50)
        return
    from services.cli.demo import run_demo

    run_demo(seconds, rate)


def main() -> None:
    """Entry point: usage mistakes print one line naming the fix, never a traceback or a box."""
    from typer._click.exceptions import NoArgsIsHelpError, UsageError  # typer vendors click

    cli_logging()
    try:
        rv = app(standalone_mode=False)
    except NoArgsIsHelpError as e:
        if e.ctx is not None:
            out.print(e.ctx.get_help())
        sys.exit(0)
    except UsageError as e:
        where = e.ctx.command_path if e.ctx else "hastream"
        where = "hastream" + where[where.index(" ") :] if " " in where else "hastream"
        err.print(f"[bold red]error:[/] {escape(e.format_message())} (see: {escape(where)} --help)")
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except KafkaException as e:  # a broker error no command expected: one line, not a traceback
        err.print(f"[bold red]error:[/] Kafka: {escape(kafka_error_text(e))}")
        sys.exit(2)
    except typer.Abort:
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
