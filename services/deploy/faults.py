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

import json
import os
import signal
import time
from pathlib import Path

from services.core.errors import FaultError
from services.deploy import processes
from services.deploy.local import Deployment, Process
from services.deploy.local import restart as _restart
from services.deploy.processes import pid_alive


def deployment(dep: Deployment | str | None = None) -> Deployment:
    """The deployment to act on: given, by name, or (None) the only or most recently started one."""
    if isinstance(dep, Deployment):
        return dep
    if dep is not None:
        return Deployment.load(dep)
    found = latest_deployment()
    if found is None:
        raise FaultError("no deployment (start one with: hastream up SPEC)")
    return found


def latest_deployment() -> Deployment | None:
    deps = Deployment.all()
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
    pid = source_pid(dep, stream)
    processes.send(pid, signal.SIGUSR1)
    return pid


def release_source(dep: Deployment | str | None, stream: str) -> int:
    """Heal the source: its producer sends everything it buffered, in order, then goes on."""
    pid = source_pid(dep, stream)
    processes.send(pid, signal.SIGUSR2)
    return pid


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
