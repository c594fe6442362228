"""A local deployment's supervisor: restarts a crashed service with backoff, as compose's ``restart: on-failure``.

``hastream up`` starts one supervisor per deployment (``python -m services.deploy.supervisor
NAME``). It starts every service as its own child, so it learns how each one ended:

- a crash (non-zero exit, or killed by a signal) is restarted after a delay that doubles
  with each crash in a row, 0.1 s up to 30 s, and starts over once the process has run
  for 10 s (Docker's restart policy does the same);
- a clean exit (status 0) is left alone;
- a role that fault injection holds down (``hastream fault kill`` marks it before the
  kill -9) stays down until ``hastream fault restart`` asks for it, which the supervisor
  carries out at once, with no delay;
- on SIGTERM (``hastream down``) it stops every service and exits: nothing is restarted.

Each start is recorded in the deployment file (pid, restart count) for ``hastream status``
and a line in the service's log says why it was started again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

from services.core.logs import LineFormatter, setup_logging
from services.deploy import processes
from services.deploy.deployment import Deployment, Process
from services.deploy.local import process_env, service_env, stop_timeout

log = logging.getLogger("hastream.supervisor")

FIRST_DELAY_S = 0.1
MAX_DELAY_S = 30.0
RESET_AFTER_S = 10.0  # a process that ran this long before crashing starts a new run of crashes


def backoff(crashes: int) -> float:
    """Delay before restarting after the ``crashes``-th crash in a row (1 is the first)."""
    return min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** max(0, crashes - 1))


Spawn = Callable[[Process], subprocess.Popen]


@dataclass
class Child:
    """One role as the supervisor sees it."""

    proc: Process  # the deployment file's record (pid, restarts)
    popen: subprocess.Popen | None = None  # None while down
    started: float = 0.0
    crashes: int = 0  # crashes in a row
    due: float | None = None  # when to start it again after a crash

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


class Supervisor:
    """Starts a deployment's processes and keeps them running (``step`` once per tick)."""

    def __init__(self, dep: Deployment, spawn: Spawn | None = None, clock: Callable[[], float] = time.monotonic):
        self.dep, self.clock = dep, clock
        env, logins = service_env(dep.bootstrap), dep.logins()
        self.spawn: Spawn = spawn or (lambda p: processes.spawn(p.argv, p.log, process_env(env, p, logins)))
        self.children = [Child(p) for p in dep.processes]
        self.stopping = False

    def start_all(self) -> None:
        now = self.clock()
        for c in self.children:
            self._start(c, now, first=True)
        self._save()

    def step(self) -> None:
        """Look at every child once: carry out restart requests, notice exits, restart what is due."""
        now = self.clock()
        changed = False
        for c in self.children:
            changed |= self._check(c, now)
        if changed:
            self._save()

    def _check(self, c: Child, now: float) -> bool:
        role = c.proc.role
        if self.dep.take_restart_request(role):
            if c.popen is not None and c.running():
                with contextlib.suppress(ProcessLookupError):
                    processes.kill(c.popen)
            self._note(c, "restarted on request")
            self._start(c, now)
            return True
        if c.running():
            return False
        if c.popen is not None:
            self._ended(c, c.popen.returncode, now)
        if c.due is not None and now >= c.due:
            self._start(c, now)
            return True
        return False

    def _ended(self, c: Child, code: int, now: float) -> None:
        """Decide what a process that just ended gets: a restart later, or nothing."""
        c.popen = None
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        if self.dep.held(c.proc.role):
            log.info("%s %s: held down by fault injection until 'hastream fault restart'", c.proc.role, how)
        elif code == 0:
            log.info("%s ended cleanly: not restarted", c.proc.role)
        else:
            c.crashes = 1 if now - c.started >= RESET_AFTER_S else c.crashes + 1
            delay = backoff(c.crashes)
            c.due = now + delay
            log.warning("%s crashed (%s): restart in %.1fs (crash %d in a row)", c.proc.role, how, delay, c.crashes)
            self._note(c, f"crashed ({how}); restarting in {delay:.1f}s")

    def _start(self, c: Child, now: float, first: bool = False) -> None:
        c.popen = self.spawn(c.proc)
        c.proc.pid, c.started, c.due = c.popen.pid, now, None
        if not first:
            c.proc.restarts += 1
            log.info("%s started again: pid %d (restart %d)", c.proc.role, c.proc.pid, c.proc.restarts)

    def _note(self, c: Child, what: str) -> None:
        """One line in the service's own log, where its user looks first."""
        line = LineFormatter(c.proc.role).format(log.makeRecord(log.name, logging.INFO, __file__, 0, what, (), None))
        try:
            with open(c.proc.log, "a") as f:
                f.write(line + "\n")
        except OSError:
            pass

    def _save(self) -> None:
        self.dep.processes = [c.proc for c in self.children]
        self.dep.save()

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM every service (a paused one is continued first), SIGKILL what outlives ``timeout``
        (default: ``stop_timeout``, short when the broker is unreachable)."""
        live = [c.popen for c in self.children if c.popen is not None and c.running()]
        if live:
            processes.stop(live, stop_timeout(self.dep.bootstrap) if timeout is None else timeout, resume_first=True)

    def run(self, tick_s: float = 0.1) -> None:
        """Supervise until SIGTERM or SIGINT, then stop every service."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.dep.supervisor = os.getpid()
        self.start_all()
        try:
            while not self.stopping:
                self.step()
                time.sleep(tick_s)
        finally:
            self.stop()

    def _on_signal(self, *_: object) -> None:
        self.stopping = True


def main(argv: list[str]) -> int:
    setup_logging("supervisor")
    if len(argv) != 1:
        print("usage: python -m services.deploy.supervisor DEPLOYMENT", file=sys.stderr)
        return 2
    try:
        dep = Deployment.load(argv[0])
    except LookupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Supervisor(dep).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
