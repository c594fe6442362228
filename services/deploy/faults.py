"""Fault injection on a running local deployment: the faults DPC must survive, on demand.

kill -9, SIGSTOP/SIGCONT (a hung service) and restart act on a deployment's processes by
role (``<node>.r<replica>.p<partition>``). A killed service stays down until it is restarted:
``kill`` first tells the deployment's supervisor to hold the role (it would otherwise restart
a crash within a fraction of a second), and ``restart`` lifts the hold. A source that stops
is a ``hastream produce`` process told to hold its tuples (SIGUSR1) and later to release them (SIGUSR2), so they
arrive late, as from a disconnected input; producers record their pid under
``<deployment dir>/sources/<stream>.json`` for this. ``hastream fault ...`` is the CLI over
these functions; test harnesses call them directly.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from services.core.errors import FaultError
from services.core.paths import hastream_home
from services.deploy import processes
from services.deploy.deployment import Deployment, Process
from services.deploy.local import restart as _restart
from services.deploy.processes import pid_alive


def deployment(dep: Deployment | str | None = None) -> Deployment:
    """The deployment to act on: given, by name, or (None) the most recently started running one.

    Faults need live processes, so a stopped deployment is refused with a line saying so.
    """
    if isinstance(dep, Deployment):
        return dep
    if dep is not None:
        d = Deployment.load(dep)
        if not (active(d) or d.processes):  # taken down (its processes a crash left behind can still be restarted)
            raise FaultError(f"deployment '{d.name}' is stopped (start it with: hastream up {d.spec_path})")
        return d
    found = latest_deployment()
    if found is None:
        raise FaultError("no running deployment (start one with: hastream up SPEC)")
    return found


def active(d: Deployment) -> bool:
    """Whether ``d`` is in use: its services run, a producer registered with it does, or a fault holds a service down."""
    return d.running() or bool(running_sources(d)) or any(d.held(p.role) for p in d.processes)


def latest_deployment() -> Deployment | None:
    """The active deployment started last, if any is."""
    deps = [d for d in Deployment.all() if active(d)]
    if not deps:
        return None
    return max(deps, key=lambda d: (d.started, (d.dir / "deployment.json").stat().st_mtime))


# -- services -------------------------------------------------------------------


def find_process(dep: Deployment, role: str) -> Process:
    for p in dep.processes:
        if p.role == role:
            return p
    roles = ", ".join(p.role for p in dep.processes) or "none (is it running?)"
    raise FaultError(f"no process '{role}' in deployment '{dep.name}' (roles: {roles})")


def _running(dep: Deployment, role: str) -> Process:
    p = find_process(dep, role)
    if not dep.alive(p):
        raise FaultError(
            f"process '{role}' (pid {p.pid}) of deployment '{dep.name}' is not running "
            f"(start it again with: hastream fault restart {role})"
        )
    return p


def kill(dep: Deployment | str | None, role: str, timeout: float = 10) -> Process:
    """kill -9 the process of ``role`` and wait until it is gone; it stays down until ``restart``."""
    d = deployment(dep)
    p = _running(d, role)
    d.hold(role)
    processes.kill(p.pid, timeout)
    return p


def pause(dep: Deployment | str | None, role: str) -> Process:
    """SIGSTOP: the process hangs (no heartbeats, no output) but keeps its state."""
    p = _running(deployment(dep), role)
    processes.pause(p.pid)
    return p


def resume(dep: Deployment | str | None, role: str) -> Process:
    """SIGCONT a paused process."""
    p = _running(deployment(dep), role)
    processes.resume(p.pid)
    return p


def restart(dep: Deployment | str | None, role: str) -> Process:
    """Start ``role`` again with its recorded command line and log (kill -9 first if it runs),
    whether it was killed, held down or crashed."""
    d = deployment(dep)
    find_process(d, role)
    return _restart(d, role)


# -- sources --------------------------------------------------------------------


def source_file(dep: Deployment, stream: str) -> Path:
    return dep.dir / "sources" / f"{stream}.json"


def register_source(dep: Deployment, stream: str, pid: int | None = None) -> Path:
    """Record that ``pid`` (default: this process) produces ``stream``, for stop-source."""
    f = source_file(dep, stream)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"pid": pid or os.getpid(), "stream": stream, "started": time.time()}))
    tmp.replace(f)
    return f


def unregister_source(dep: Deployment, stream: str, pid: int | None = None) -> None:
    """Forget the record if it is still ours (another producer may have replaced it)."""
    f = source_file(dep, stream)
    try:
        if json.loads(f.read_text()).get("pid") == (pid or os.getpid()):
            f.unlink()
    except (OSError, ValueError):
        pass


def running_sources(dep: Deployment) -> dict[str, int]:
    """Stream -> pid of every recorded producer that is still alive."""
    out = {}
    for f in sorted((dep.dir / "sources").glob("*.json")):
        try:
            pid = int(json.loads(f.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid_alive(pid):
            out[f.stem] = pid
    return out


def source_pid(dep: Deployment | str | None, stream: str) -> int:
    d = deployment(dep)
    pid = running_sources(d).get(stream)
    if pid is None:
        running = ", ".join(running_sources(d)) or "none"
        raise FaultError(
            f"no running producer of stream '{stream}' in deployment '{d.name}' "
            f"(running sources: {running}; start one with: hastream produce SPEC {stream} --count 0)"
        )
    return pid


def hold_source(dep: Deployment | str | None, stream: str) -> int:
    """Stop the source: its producer buffers tuples (and boundaries) instead of sending them."""
    d = deployment(dep)
    pid = source_pid(d, stream)
    cancel_release(d, stream)
    processes.send(pid, signal.SIGUSR1)
    return pid


def release_source(dep: Deployment | str | None, stream: str) -> int:
    """Heal the source: its producer sends everything it buffered, in order, then goes on."""
    d = deployment(dep)
    pid = source_pid(d, stream)
    cancel_release(d, stream)
    processes.send(pid, signal.SIGUSR2)
    return pid


def release_later(dep: Deployment, stream: str, seconds: float) -> int:
    """Release the held source after ``seconds`` from a detached process, so the shell is free
    meanwhile; returns its pid. A later stop-source or resume-source of the stream cancels it."""
    cancel_release(dep, stream)
    argv = [
        sys.executable,
        "-m",
        "services.deploy.faults",
        dep.name,
        stream,
        str(source_pid(dep, stream)),
        str(seconds),
    ]
    logs = dep.dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HASTREAM_HOME": str(hastream_home().resolve())}
    pid = processes.spawn(argv, logs / "faults.log", env).pid
    _timer_file(dep, stream).write_text(str(pid))
    return pid


def cancel_release(dep: Deployment, stream: str) -> None:
    """Stop a pending timed release of ``stream`` (it would end a later stop too early)."""
    f = _timer_file(dep, stream)
    try:
        pid = int(f.read_text())
    except (OSError, ValueError):
        return
    f.unlink(missing_ok=True)
    if pid != os.getpid() and pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            processes.send(pid, signal.SIGTERM)


def _timer_file(dep: Deployment, stream: str) -> Path:
    f = dep.dir / "sources" / f"{stream}.timer"
    f.parent.mkdir(parents=True, exist_ok=True)
    return f


def _release_after(name: str, stream: str, pid: int, seconds: float) -> int:
    """The detached timer of ``release_later``: sleep, then release the source if its producer is the same."""
    time.sleep(seconds)
    dep = Deployment.load(name)
    _timer_file(dep, stream).unlink(missing_ok=True)
    if running_sources(dep).get(stream) != pid:
        print(f"source '{stream}' of '{name}': producer {pid} is gone, nothing to resume", flush=True)
        return 0
    processes.send(pid, signal.SIGUSR2)
    print(f"resumed source '{stream}' of '{name}' (pid {pid}) after {seconds:g}s", flush=True)
    return 0


def stop_source(dep: Deployment | str | None, stream: str, seconds: float | None = None) -> int:
    """Hold the source; with ``seconds``, block that long and release it (also on Ctrl-C)."""
    d = deployment(dep)
    pid = hold_source(d, stream)
    if seconds is not None:
        try:
            time.sleep(seconds)
        finally:
            if pid_alive(pid):
                processes.send(pid, signal.SIGUSR2)
    return pid


if __name__ == "__main__":  # the detached timer of release_later: NAME STREAM PID SECONDS
    sys.exit(_release_after(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
