"""``hastream source end|dead``: tell downstream nodes that an input stream will send nothing more.

Both write the stream's final boundary (``END_OF_TIME``) to every partition, after the last
id there. ``end`` is a finished source: everything it had is in the log. ``dead`` is the
paper's permanent failure: its running producer, if this machine has one, is killed first
(what it held is lost), and the nodes' results become stable without the stream. Tuples that
show up later fall below the final boundary and go to the dead-letter topics.
"""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.common import BootstrapOpt, SpecArg, bootstrap_for, fail, out, spec_or_exit
from services.spec import Spec

source_app = typer.Typer(no_args_is_help=True, help="End an input stream, or declare it permanently failed.")

StreamArg = Annotated[str, typer.Argument(help="Input stream of the spec.")]


@source_app.command()
def end(spec: SpecArg, stream: StreamArg, bootstrap: BootstrapOpt = None) -> None:
    """The source is finished: its final boundary goes out, so results no longer wait for it."""
    ids = _final_boundary(spec_or_exit(spec), stream, bootstrap)
    out.print(f"ended '{stream}': final boundary after ids {ids} (by partition)")


@source_app.command()
def dead(
    spec: SpecArg,
    stream: StreamArg,
    deployment: Annotated[
        str | None, typer.Option("--deployment", "-d", help="Deployment whose producer of the stream to kill.")
    ] = None,
    bootstrap: BootstrapOpt = None,
) -> None:
    """The source failed for good: kill its producer here if it runs, and let results be stable without it."""
    from services.cli.streams_cmd import _source_deployment
    from services.deploy import faults, processes

    s = spec_or_exit(spec)
    dep = _source_deployment(s.name, deployment)
    pid = faults.running_sources(dep).get(stream) if dep is not None else None
    if pid is not None:
        processes.kill(pid)
    ids = _final_boundary(s, stream, bootstrap)
    killed = f"; killed its producer (pid {pid})" if pid is not None else ""
    out.print(f"declared '{stream}' dead: final boundary after ids {ids} (by partition){killed}")


def _final_boundary(s: Spec, stream: str, bootstrap: str | None) -> list[int]:
    """Write the final boundary of ``stream``; returns the last id of each partition (-1: empty)."""
    from services.client.source import SourceWriter

    try:
        writer = SourceWriter(s, stream, bootstrap_for(s, bootstrap, stream, writer=True))
    except ValueError as e:
        raise fail(str(e)) from None
    writer.end()
    return [i - 1 for i in writer.next_id]
