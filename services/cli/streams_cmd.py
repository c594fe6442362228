"""``hastream produce``, ``hastream tail`` and ``hastream schema``: writing to an input stream, following
any stream, and the Avro schema an outside client reads it with."""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterable, Iterator

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from services.cli.common import BootstrapOpt, SpecArg, bootstrap_for, err, fail, out, spec_or_exit
from services.cli.egress_cmd import tail_egress
from services.spec import Spec

if TYPE_CHECKING:
    from services.client.partition import ViewEvent
    from services.client.source import SourceWriter
    from services.client.view import StreamView


def schema(
    spec: SpecArg,
    stream: Annotated[str, typer.Argument(help="Stream whose schema to print.")],
    header: Annotated[
        bool, typer.Option("--header", help="Print the schema field of the ht header (<name>:<fingerprint>) instead.")
    ] = False,
) -> None:
    """Print the Avro schema (JSON) of a stream's values: what a plain Kafka client decodes them with.

    Values are schemaless Avro (no magic byte, no registry id); every message names its
    schema and fingerprint in the schema field of its ht header, which --header prints for comparison.
    """
    from services.core.codec import schema_header, schema_json

    s = spec_or_exit(spec)
    sd = s.streams.get(stream)
    if sd is None:
        raise fail(f"no stream '{stream}' in {spec} (streams: {', '.join(sorted(s.streams))})")
    if header:
        out.print(schema_header(sd.schema).decode(), highlight=False)
    else:
        print(json.dumps(json.loads(schema_json(sd.schema)), indent=2))


JsonLinesOpt = Annotated[
    Path | None,
    typer.Option("--json", help="Read records as JSON lines from this file ('-' = stdin) instead of generating."),
]
EventTimeOpt = Annotated[
    str,
    typer.Option(
        "--time",
        help="Generated 'ts': 'wall' = the wall clock when generated (live runs), 'synthetic' = start + i * 1000/rate ms (deterministic steps).",
    ),
]
DeploymentOpt = Annotated[
    str | None,
    typer.Option(
        "--deployment",
        "-d",
        help="Deployment to register with, so 'hastream fault stop-source' finds this producer (default: the spec's, else the most recent).",
    ),
]
KeepOpenOpt = Annotated[
    bool,
    typer.Option(
        "--keep-open",
        help="At the end, leave the stream open for a later producer instead of ending it (its last results stay tentative until one comes).",
    ),
]


def produce(
    spec: SpecArg,
    stream: Annotated[str, typer.Argument(help="Input stream to write.")],
    count: Annotated[int, typer.Option("--count", "-n", help="Tuples to generate (0 = until Ctrl-C).")] = 1000,
    rate: Annotated[float, typer.Option(help="Tuples per second (0 = as fast as possible).")] = 0,
    sensors: Annotated[int, typer.Option(help="Distinct keys of the generated workload.")] = 10,
    seed: Annotated[int, typer.Option(help="Workload random seed.")] = 7,
    json_lines: JsonLinesOpt = None,
    event_time: EventTimeOpt = "wall",
    deployment: DeploymentOpt = None,
    keep_open: KeepOpenOpt = False,
    bootstrap: BootstrapOpt = None,
) -> None:
    """Write tuples to an input stream (a generated sensor workload, or JSON lines), with periodic BOUNDARY tuples.

    At the end the stream is ended with its final boundary, so every result downstream
    becomes stable (unless --keep-open). SIGUSR1 holds the tuples back (a stopped source),
    SIGUSR2 sends them late, in order.
    """
    from services.client.source import END_OF_TIME

    if event_time not in ("wall", "synthetic"):
        raise fail(f"--time must be 'wall' or 'synthetic', got {event_time!r}")
    s = spec_or_exit(spec)
    writer = _writer(s, stream, bootstrap, wall_clock=json_lines is None and event_time == "wall")
    if json_lines is not None:
        records, total = _json_records(json_lines), None
    else:
        records = _generated(s, stream, count, rate, sensors, seed, wall_clock=event_time == "wall")
        total = count or None
    with _registered(s.name, stream, deployment):
        writer.install_signal_handlers()
        sent = _send_paced(writer, records, rate, total, None if keep_open else END_OF_TIME, json_lines is not None)
    out.print(f"produced {sent} tuples to '{stream}'" + ("" if keep_open else ", and ended the stream"))
    if writer.late:
        err.print(
            f"[yellow]warning:[/] {writer.late} tuples had a 'ts' below an earlier boundary; nodes dead-letter "
            "them (send records in 'ts' order)"
        )


def _writer(s: Spec, stream: str, bootstrap: str | None, wall_clock: bool) -> SourceWriter:
    """The stream's one writer: a stream another producer writes, or no input stream, is one error line."""
    from services.client.source import SourceWriter

    try:
        return SourceWriter(
            s,
            stream,
            bootstrap_for(s, bootstrap, stream, writer=True),
            wall_clock=wall_clock,
            exclusive=True,
        )
    except ValueError as e:
        raise fail(str(e)) from None


def _generated(
    s: Spec, stream: str, count: int, rate: float, sensors: int, seed: int, wall_clock: bool
) -> Iterator[dict[str, Any]]:
    """The sensor readings workload, its event time stepping at ``rate``: only for a stream of readings
    (``reading``, or ``located``: with each sensor's building and region)."""
    from services.client.workload import located, readings

    generators: dict[str, Callable[..., Iterator[dict[str, Any]]]] = {"reading": readings, "located": located}
    schema = s.streams[stream].schema
    if schema not in generators:
        raise fail(
            f"the generator writes 'reading' or 'located' tuples but '{stream}' has schema '{schema}': use --json"
        )
    start = int(time.time() * 1000)
    step = int(1000 / rate) if rate > 0 else 10
    return generators[schema](
        count or None,
        sensors=sensors,
        seed=seed,
        start_ms=start,
        step_ms=max(step, 1),
        wall_clock=wall_clock,
    )


@contextmanager
def _registered(spec_name: str, stream: str, deployment: str | None) -> Iterator[None]:
    """While producing, registered with the deployment so that 'hastream fault stop-source' finds this producer."""
    from services.deploy import faults

    dep = _source_deployment(spec_name, deployment)
    if dep is not None:
        faults.register_source(dep, stream)
    try:
        yield
    finally:
        if dep is not None:
            faults.unregister_source(dep, stream)


def _source_deployment(spec_name: str, name: str | None):
    """Where a producer registers: the named deployment, else the spec's, else the most recent (or none)."""
    from services.deploy.deployment import Deployment
    from services.deploy.faults import latest_deployment

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


def _send_paced(writer, records, rate: float, total: int | None, final: int | None, blocking: bool) -> int:
    """Send at ``rate`` with boundaries while idle and a final one (at ``final`` if given); a held
    writer waits for release. ``blocking``: reading ``records`` may wait (stdin), boundaries go on."""
    from services.client.pump import pump

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
            final_boundary=final,
            blocking=blocking,
            on_wait=lambda held: err.print(
                f"source stopped: {held} messages wait for 'hastream fault resume-source' (or Ctrl-C to send them now)"
            ),
        )


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
    cec: Annotated[
        bool, typer.Option("--cec", help="Show a CEC node's footprints too (reads one replica's topic raw).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per tuple.")] = False,
    egress: Annotated[
        str | None,
        typer.Option(help="Read the stream's egress topic of this mode (stable or latest) as a consumer does."),
    ] = None,
    bootstrap: BootstrapOpt = None,
) -> None:
    """Print a stream's tuples, decoded: stable ones, tentative ones (T) and their undoing, following the best replica."""
    s = spec_or_exit(spec)
    if egress is not None:
        tail_egress(s, stream, egress, bootstrap, limit, idle, as_json)
        return
    if replica is not None or cec:
        where = bootstrap_for(s, bootstrap, stream)
        _tail_raw(s, stream, where, replica or 0, from_beginning, limit, idle, stable_only, as_json, cec)
        return
    view = _view(s, stream, bootstrap_for(s, bootstrap, stream), stable_only, from_beginning)
    n = 0
    switches = 0
    try:
        for ev in view.follow(idle_timeout=idle or None):
            if not as_json:
                _print_switches(view.switches[switches:])
            switches = len(view.switches)
            _print_event(ev, as_json)
            if ev.kind in ("stable", "tentative"):
                n += 1
                if limit and n >= limit:
                    break
    except KeyboardInterrupt:
        pass
    finally:
        view.close()


def _view(s: Spec, stream: str, bootstrap: str, stable_only: bool, from_beginning: bool) -> StreamView:
    """The stream as a client sees it, over the best replica; a stream that cannot be read is one error line."""
    from services.client.view import StreamView

    try:
        return StreamView(
            s,
            stream,
            bootstrap,
            stable_only=stable_only,
            from_beginning=from_beginning,
            keep_stable=False,
        )
    except ValueError as e:
        raise fail(str(e)) from None


def _print_switches(switches: Iterable[tuple[int, int, int, Any]]) -> None:
    for p, old, new, _ in switches:
        out.print(f"[cyan]switch[/]    p{p} replica r{old} -> r{new}")


def _print_event(ev: ViewEvent, as_json: bool) -> None:
    """One tuple of the view (a JSON object, or a line coloured by its type), or an undo or REC_DONE line."""
    if as_json:
        out.print_json(json.dumps(_event_json(ev)), indent=None)
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


def _event_json(ev: ViewEvent) -> dict[str, Any]:
    return {
        "type": ev.kind.upper(),
        "id": ev.id,
        "stime": ev.stime,
        "partition": ev.partition,
        "replica": ev.replica,
        "offset": ev.offset,
        "value": ev.record,
    }


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
    cec: bool = False,
) -> None:
    """One replica's topic as it is: every tuple with its type (``cec``: and every footprint), no replica
    choice, no undo applied."""
    from services.client.reader import StreamReader

    try:
        reader = StreamReader(s, stream, bootstrap, replica, from_beginning, footprints=cec)
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
