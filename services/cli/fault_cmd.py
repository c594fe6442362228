"""``hastream fault``: inject the faults DPC must survive into a running local deployment.

kill -9, pause (SIGSTOP) / resume (SIGCONT) and restart a service by role, and stop a
source for a while so its tuples arrive late. The work is in ``services.deploy.faults``,
which tests and experiment harnesses call directly.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Callable, TypeVar

import typer

from services.cli.common import fail, out
from services.core.errors import FaultError

if TYPE_CHECKING:
    from services.deploy.deployment import Deployment

T = TypeVar("T")

fault_app = typer.Typer(
    name="fault",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Inject faults into a running local deployment (kill, pause, restart services; stop a source).",
)

RoleArg = Annotated[str, typer.Argument(help="Service role, as 'hastream status' lists it (e.g. stats.r0.p0).")]
StreamArg = Annotated[str, typer.Argument(help="Input stream whose 'hastream produce' process to act on.")]
DeploymentOpt = Annotated[
    str | None, typer.Option("--deployment", "-d", help="Deployment name (default: the running one started last).")
]


def _dep(name: str | None) -> Deployment:
    from services.deploy.faults import deployment

    try:
        return deployment(name)
    except (LookupError, FaultError) as e:
        raise fail(str(e)) from None


def _do(fn: Callable[..., T], *args: object) -> T:
    try:
        return fn(*args)
    except (FaultError, LookupError, ProcessLookupError, PermissionError) as e:
        raise fail(str(e)) from None


@fault_app.command()
def kill(role: RoleArg, deployment: DeploymentOpt = None) -> None:
    """kill -9 a service: no flush, no commit, no goodbye. It stays down until 'hastream fault restart'."""
    from services.deploy import faults

    p = _do(faults.kill, _dep(deployment), role)
    out.print(f"killed {role} (pid {p.pid}) with SIGKILL; held down until: hastream fault restart {role}")


@fault_app.command()
def pause(role: RoleArg, deployment: DeploymentOpt = None) -> None:
    """SIGSTOP a service: it hangs (no heartbeats, no output) until resumed."""
    from services.deploy import faults

    p = _do(faults.pause, _dep(deployment), role)
    out.print(f"paused {role} (pid {p.pid}); continue it with: hastream fault resume {role}")


@fault_app.command()
def resume(role: RoleArg, deployment: DeploymentOpt = None) -> None:
    """SIGCONT a paused service."""
    from services.deploy import faults

    p = _do(faults.resume, _dep(deployment), role)
    out.print(f"resumed {role} (pid {p.pid})")


@fault_app.command()
def restart(role: RoleArg, deployment: DeploymentOpt = None) -> None:
    """Start a service again with its recorded command line and log (kill -9 first if it still runs)."""
    from services.deploy import faults

    p = _do(faults.restart, _dep(deployment), role)
    out.print(f"restarted {role}: pid {p.pid}, log {p.log}")


@fault_app.command("stop-source")
def stop_source(
    stream: StreamArg,
    seconds: Annotated[
        float | None,
        typer.Option("--for", min=0, help="Resume the source after this many seconds (default: stay stopped)."),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="With --for: wait here until the source resumes (Ctrl-C resumes it early).")
    ] = False,
    deployment: DeploymentOpt = None,
) -> None:
    """Stop an input stream: its producer buffers tuples, which arrive late when it resumes.

    With --for N the command returns at once and a detached timer resumes the source N s later.
    """
    from services.deploy import faults

    dep = _dep(deployment)
    pid = _do(faults.hold_source, dep, stream)
    if seconds is None:
        out.print(f"stopped source '{stream}' (pid {pid}); resume it with: hastream fault resume-source {stream}")
    elif wait:
        out.print(f"stopped source '{stream}' (pid {pid}) for {seconds:g}s")
        _hold_here(dep, stream, seconds)
    else:
        _do(faults.release_later, dep, stream, seconds)
        out.print(
            f"stopped source '{stream}' (pid {pid}); it resumes by itself in {seconds:g}s "
            f"(now: hastream fault resume-source {stream})"
        )


def _hold_here(dep: Deployment, stream: str, seconds: float) -> None:
    """Wait ``seconds``, then resume the source (also on Ctrl-C, rather than leave it stopped)."""
    from services.deploy import faults

    try:
        time.sleep(seconds)
    finally:
        try:
            faults.release_source(dep, stream)
        except FaultError as e:
            raise fail(f"could not resume source '{stream}': {e}") from None
    out.print(f"resumed source '{stream}'")


@fault_app.command("resume-source")
def resume_source(stream: StreamArg, deployment: DeploymentOpt = None) -> None:
    """Resume a stopped input stream: its producer sends what it buffered, in order."""
    from services.deploy import faults

    pid = _do(faults.release_source, _dep(deployment), stream)
    out.print(f"resumed source '{stream}' (pid {pid})")
