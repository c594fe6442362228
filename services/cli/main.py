"""``hastream``: validate and deploy query networks, produce to and tail streams, run the demo."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from services.cli.bench_cmd import bench_app
from services.cli.common import bootstrap_for, err, fail, out, settings_or_exit, spec_or_exit
from services.cli.coordinator_cmd import coordinator as coordinator_cmd
from services.cli.coordinator_cmd import print_replica_states
from services.cli.fault_cmd import fault_app
from services.cli.kafka_cmd import kafka_app

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
node_app = typer.Typer(no_args_is_help=True, help="Run one node service process (used by 'up' and docker compose).")
app.add_typer(node_app, name="node")

SpecArg = Annotated[Path, typer.Argument(help="Query network spec (YAML).", exists=False)]
BootstrapOpt = Annotated[
    str | None,
    typer.Option(
        "--bootstrap", "-b", help="Kafka bootstrap servers (default: $HASTREAM_BOOTSTRAP or the deployment's broker)."
    ),
]


@app.command()
def validate(spec: SpecArg) -> None:
    """Check a spec; print every mistake with its file:line:col."""
    s = spec_or_exit(spec)
    out.print(
        f"[green]ok[/] {escape(str(spec))}: {len(s.streams)} streams, {len(s.operators)} operators, "
        f"{len(s.nodes)} nodes; inputs: {', '.join(s.sources())}; outputs: {', '.join(s.sinks())}"
    )


@app.command()
def up(
    spec: SpecArg,
    bootstrap: BootstrapOpt = None,
    brokers: Annotated[int, typer.Option(help="Brokers of the embedded cluster, if one is started.")] = 1,
) -> None:
    """Deploy: start the embedded broker (unless --bootstrap), create topics, start every service."""
    from services.deploy.local import up as deploy_up

    s = spec_or_exit(spec)
    try:
        dep = deploy_up(s, spec, bootstrap, brokers)
    except (RuntimeError, OSError) as e:
        raise fail(str(e)) from None
    out.print(
        f"[green]deployed[/] '{s.name}' on {dep.bootstrap}: {len(dep.processes)} processes; logs in {dep.dir / 'logs'}"
    )


@app.command()
def down(
    name: Annotated[str | None, typer.Argument(help="Deployment name (default: all).")] = None,
    kafka: Annotated[
        bool, typer.Option("--kafka", help="Also stop the embedded broker the deployment started.")
    ] = False,
) -> None:
    """Stop a deployment's services (SIGTERM: each flushes and commits)."""
    from services.deploy.local import Deployment
    from services.deploy.local import down as deploy_down

    try:
        deps = [Deployment.load(name)] if name else Deployment.all()
    except LookupError as e:
        raise fail(str(e)) from None
    for d in deps:
        stopped = deploy_down(d, stop_kafka=kafka)
        out.print(
            f"stopped '{d.name}': {len(stopped)} processes" + (" and its broker" if kafka and d.kafka_dir else "")
        )


@app.command()
def status(name: Annotated[str | None, typer.Argument(help="Deployment name (default: all).")] = None) -> None:
    """Show each deployment's processes and whether they are alive, and each node replica's DPC state."""
    from services.deploy.local import Deployment

    try:
        deps = [Deployment.load(name)] if name else Deployment.all()
    except LookupError as e:
        raise fail(str(e)) from None
    if not deps:
        out.print("no deployments")
    for d in deps:
        t = Table(title=f"{d.name} on {d.bootstrap}")
        for c in ("service", "pid", "alive", "log"):
            t.add_column(c)
        for p in d.processes:
            t.add_row(p.role, str(p.pid), "[green]yes[/]" if d.alive(p) else "[red]no[/]", p.log)
        out.print(t)
        print_replica_states(d)


@app.command()
def produce(
    spec: SpecArg,
    stream: Annotated[str, typer.Argument(help="Input stream to write.")],
    count: Annotated[int, typer.Option("--count", "-n", help="Tuples to generate (0 = until Ctrl-C).")] = 1000,
    rate: Annotated[float, typer.Option(help="Tuples per second (0 = as fast as possible).")] = 0,
    sensors: Annotated[int, typer.Option(help="Distinct keys of the generated workload.")] = 10,
    seed: Annotated[int, typer.Option(help="Workload random seed.")] = 7,
    json_lines: Annotated[
        Path | None,
        typer.Option("--json", help="Read records as JSON lines from this file ('-' = stdin) instead of generating."),
    ] = None,
    event_time: Annotated[
        str,
        typer.Option(
            "--time",
            help="Generated 'ts': 'wall' = the wall clock when generated (live runs), 'synthetic' = start + i * 1000/rate ms (deterministic steps).",
        ),
    ] = "wall",
    deployment: Annotated[
        str | None,
        typer.Option(
            "--deployment",
            "-d",
            help="Deployment to register with, so 'hastream fault stop-source' finds this producer (default: the spec's, else the most recent).",
        ),
    ] = None,
    bootstrap: BootstrapOpt = None,
) -> None:
    """Write tuples to an input stream (a generated sensor workload, or JSON lines), with periodic BOUNDARY tuples.

    SIGUSR1 holds the tuples back (a stopped source), SIGUSR2 sends them late, in order.
    """
    from services.client.source import SourceWriter, readings

    if event_time not in ("wall", "synthetic"):
        raise fail(f"--time must be 'wall' or 'synthetic', got {event_time!r}")
    s = spec_or_exit(spec)
    try:
        writer = SourceWriter(
            s, stream, bootstrap_for(s, bootstrap), wall_clock=json_lines is None and event_time == "wall"
        )
    except ValueError as e:
        raise fail(str(e)) from None
    if json_lines is not None:
        records = _json_records(json_lines)
        total = None
    else:
        if s.streams[stream].schema != "reading":
            raise fail(
                f"the generator writes 'reading' tuples but '{stream}' has schema '{s.streams[stream].schema}': use --json"
            )
        start = int(time.time() * 1000)
        step = int(1000 / rate) if rate > 0 else 10
        records = readings(
            count or None,
            sensors=sensors,
            seed=seed,
            start_ms=start,
            step_ms=max(step, 1),
            wall_clock=event_time == "wall",
        )
        total = count or None
    from services.deploy import faults

    dep = _source_deployment(s.name, deployment)
    if dep is not None:
        faults.register_source(dep, stream)
    writer.install_signal_handlers()
    try:
        sent = _send_paced(writer, records, rate, total)
    finally:
        if dep is not None:
            faults.unregister_source(dep, stream)
    out.print(f"produced {sent} tuples to '{stream}'")
    if writer.late:
        err.print(
            f"[yellow]warning:[/] {writer.late} tuples had a 'ts' below an earlier boundary; nodes dead-letter "
            "them (send records in 'ts' order)"
        )


def _source_deployment(spec_name: str, name: str | None):
    """Where a producer registers: the named deployment, else the spec's, else the most recent (or none)."""
    from services.deploy.faults import latest_deployment
    from services.deploy.local import Deployment

    try:
        return Deployment.load(name or spec_name)
    except LookupError as e:
        if name:
            raise fail(str(e)) from None
    return latest_deployment()


def _json_records(path: Path):
    f = sys.stdin if str(path) == "-" else open(path)
    for i, line in enumerate(f, 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise fail(f"{path}:{i}: not JSON: {e.msg}") from None


def _send_paced(writer, records, rate: float, total: int | None) -> int:
    """Send at ``rate`` with boundaries while idle and a final one; a held writer waits for release."""
    from services.client.source import pump

    def bad_record(i: int, e: Exception) -> None:
        raise fail(f"record {i} does not fit the stream's schema: {e}")

    with Progress(
        TextColumn("producing"),
        BarColumn(),
        TextColumn("{task.completed} tuples"),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as prog:
        task = prog.add_task("produce", total=total)
        return pump(
            writer,
            records,
            rate,
            progress=lambda n: prog.update(task, completed=n),
            on_record_error=bad_record,
            on_wait=lambda held: err.print(
                f"source stopped: {held} messages wait for 'hastream fault resume-source' (or Ctrl-C to send them now)"
            ),
        )


@app.command()
def tail(
    spec: SpecArg,
    stream: Annotated[str, typer.Argument(help="Stream to read.")],
    replica: Annotated[
        int | None, typer.Option(help="Read only this replica's topic, raw (default: follow the best replica).")
    ] = None,
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning/--new", help="Start at the oldest tuple or only show new ones.")
    ] = True,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Stop after this many tuples (0 = follow).")] = 0,
    idle: Annotated[float, typer.Option(help="Stop after this many seconds without tuples (0 = never).")] = 0,
    stable_only: Annotated[bool, typer.Option("--stable-only", help="Print only STABLE tuples.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per tuple.")] = False,
    bootstrap: BootstrapOpt = None,
) -> None:
    """Print a stream's tuples, decoded: stable ones, tentative ones (T) and their undoing, following the best replica."""
    s = spec_or_exit(spec)
    if replica is not None:
        _tail_raw(s, stream, bootstrap_for(s, bootstrap), replica, from_beginning, limit, idle, stable_only, as_json)
        return
    from services.client.view import StreamView

    try:
        view = StreamView(
            s,
            stream,
            bootstrap_for(s, bootstrap),
            stable_only=stable_only,
            from_beginning=from_beginning,
            keep_stable=False,
        )
    except ValueError as e:
        raise fail(str(e)) from None
    n = 0
    switches = 0
    try:
        for ev in view.follow(idle_timeout=idle or None):
            for p, old, new, _ in view.switches[switches:]:
                if not as_json:
                    out.print(f"[cyan]switch[/]    p{p} replica r{old} -> r{new}")
            switches = len(view.switches)
            if as_json:
                out.print_json(
                    json.dumps(
                        {
                            "type": ev.kind.upper(),
                            "id": ev.id,
                            "stime": ev.stime,
                            "partition": ev.partition,
                            "replica": ev.replica,
                            "offset": ev.offset,
                            "value": ev.record,
                        }
                    ),
                    indent=None,
                )
            elif ev.kind == "stable":
                out.print(
                    f"[green]S[/] p{ev.partition} r{ev.replica} id={ev.id:<6} stime={ev.stime} {escape(json.dumps(ev.record))}"
                )
            elif ev.kind == "tentative":
                out.print(
                    f"[bold yellow]T[/] [dim]p{ev.partition} r{ev.replica} id={ev.id:<6} stime={ev.stime} "
                    f"{escape(json.dumps(ev.record))}[/]"
                )
            elif ev.kind == "undo":
                out.print(f"[magenta]undo[/]      p{ev.partition} after id {ev.id}: tentative tuples after it are void")
            else:
                out.print(f"[cyan]rec_done[/]  p{ev.partition} at id {ev.id}: reconciliation finished")
            if ev.kind in ("stable", "tentative"):
                n += 1
                if limit and n >= limit:
                    break
    except KeyboardInterrupt:
        pass
    finally:
        view.close()


def _tail_raw(
    s,
    stream: str,
    bootstrap: str,
    replica: int,
    from_beginning: bool,
    limit: int,
    idle: float,
    stable_only: bool,
    as_json: bool,
) -> None:
    """One replica's topic as it is: every tuple with its type, no replica choice, no undo applied."""
    from services.client.reader import StreamReader

    try:
        reader = StreamReader(s, stream, bootstrap, replica, from_beginning)
    except ValueError as e:
        raise fail(str(e)) from None
    n = 0
    try:
        for t in reader.follow(idle_timeout=idle or None):
            if stable_only and t.meta.type.value != "STABLE":
                continue
            if as_json:
                out.print_json(
                    json.dumps(
                        {
                            "type": t.meta.type.value,
                            "id": t.meta.id,
                            "stime": t.meta.stime,
                            "partition": t.partition,
                            "offset": t.offset,
                            "value": t.value,
                        }
                    ),
                    indent=None,
                )
            else:
                colour = "green" if t.meta.type.value == "STABLE" else "yellow"
                out.print(
                    f"[{colour}]{t.meta.type.value:9}[/] p{t.partition} id={t.meta.id:<6} stime={t.meta.stime} "
                    f"{escape(json.dumps(t.value))}"
                )
            n += 1
            if limit and n >= limit:
                break
    except KeyboardInterrupt:
        pass
    finally:
        reader.close()


@node_app.command("run")
def node_run(
    spec: SpecArg,
    node: Annotated[str, typer.Argument(help="Node name in the spec.")],
    partition: Annotated[int, typer.Option(help="Partition this process owns.")] = 0,
    replica: Annotated[int, typer.Option(help="Replica index of this process.")] = 0,
    bootstrap: BootstrapOpt = None,
) -> None:
    """Run one node replica partition until SIGTERM."""
    from services.node.loop import NodeService

    s = spec_or_exit(spec)
    settings = settings_or_exit(bootstrap)
    if node not in s.nodes:
        raise fail(f"no node '{node}' in {spec} (nodes: {', '.join(s.nodes)})")
    if not 0 <= partition < s.node_partitions(node):
        raise fail(f"node '{node}' has partitions 0..{s.node_partitions(node) - 1}; got --partition {partition}")
    if not 0 <= replica < s.nodes[node].replicas:
        raise fail(f"node '{node}' has replicas 0..{s.nodes[node].replicas - 1}; got --replica {replica}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("hastream.librdkafka").setLevel(logging.WARNING)
    stats = NodeService(s, node, partition, replica, settings).run()
    out.print(
        f"node {node} p{partition} r{replica} stopped: consumed {stats.consumed}, produced {stats.produced}, "
        f"dead-lettered {stats.deadlettered}"
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

    # Client-library chatter (retries while a broker starts) is not for a CLI user; errors are.
    logging.getLogger("hastream.librdkafka").setLevel(logging.ERROR)

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
    except typer.Abort:
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
