"""Spawning, signalling and stopping local processes: the one place hastream does it.

The local launcher (``local.py``), fault injection (``faults.py``) and the experiment
harness all act on processes through these functions. A process is named by its pid, or by
the ``subprocess.Popen`` that started it when this program is its parent (then waiting on it
also reaps it). Every service runs in its own session, appending its output to a log.
"""

from __future__ import annotations

import logging
import os
import signal as _signal
import subprocess
import time
from pathlib import Path
from typing import Iterable

from services.core.paths import REPO_ROOT

Proc = int | subprocess.Popen  # a pid, or the Popen of a child of this process

log = logging.getLogger("hastream.processes")


def spawn(argv: list[str], log: Path | str, env: dict[str, str]) -> subprocess.Popen:
    """Start one process in its own session from the repository root, appending stdout and stderr to ``log``."""
    with open(log, "ab") as f:
        return subprocess.Popen(
            argv,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )


def run(argv: list[str], cwd: Path = REPO_ROOT) -> int:
    """Run a command in the foreground on this terminal and return its exit code. Ctrl-C reaches
    the command too (same process group), so this waits for it to end on its own terms."""
    proc = subprocess.Popen(argv, cwd=cwd)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def pid_of(p: Proc) -> int:
    return p if isinstance(p, int) else p.pid


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def alive(p: Proc) -> bool:
    if isinstance(p, int):
        return pid_alive(p)
    return p.poll() is None


def send(p: Proc, sig: int) -> None:
    """Send ``sig``; raises ProcessLookupError if the process is gone (PermissionError if not ours)."""
    os.kill(pid_of(p), sig)


def pause(p: Proc) -> None:
    """SIGSTOP: the process hangs (no heartbeats, no output) but keeps its state."""
    send(p, _signal.SIGSTOP)


def resume(p: Proc) -> None:
    """SIGCONT a paused process."""
    send(p, _signal.SIGCONT)


def wait_gone(p: Proc, timeout: float | None = 10, poll_s: float = 0.02) -> bool:
    """Wait up to ``timeout`` seconds (None: forever) for the process to end; whether it did."""
    if not isinstance(p, int):
        try:
            p.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = None if timeout is None else time.monotonic() + timeout
    while pid_alive(p):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def kill(p: Proc, timeout: float | None = 10) -> bool:
    """kill -9 (no flush, no commit, no goodbye) and wait until the process is gone; whether it is."""
    send(p, _signal.SIGKILL)
    return wait_gone(p, timeout)


def stop(procs: Iterable[Proc], timeout: float = 30, resume_first: bool = False) -> list[Proc]:
    """SIGTERM every live process (SIGCONT first with ``resume_first``, so a paused one can act on it),
    wait up to ``timeout`` for all to end, then kill -9 what is still alive. Returns those signalled."""
    live = [p for p in procs if alive(p)]
    signalled = []
    for p in live:
        try:
            if resume_first:
                resume(p)
            send(p, _signal.SIGTERM)
            signalled.append(p)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for p in live:
        if not wait_gone(p, max(0.0, deadline - time.monotonic()), poll_s=0.1):
            what = f" ({p.args!r})" if isinstance(p, subprocess.Popen) else ""
            log.warning("pid %d%s did not end within %g s of SIGTERM: killed", pid_of(p), what, timeout)
            try:
                kill(p)
            except ProcessLookupError:
                pass
    return signalled
