"""A local deployment's record: its processes, supervisor and broker, and the requests left for its supervisor.

The deployment's state (pids, restarts, bootstrap, logs) is a JSON file under
``.hastream/deployments/<name>/`` so later commands can find it; fault injection leaves requests
for the supervisor beside it (``hold``, ``request_restart``), a marker file per role.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from services.core.login import Login
from services.core.paths import hastream_home
from services.deploy import access, processes


@dataclass
class Process:
    role: str  # "<node>.r<replica>.p<partition>"
    pid: int
    log: str
    argv: list[str]
    restarts: int = 0  # starts after the first, by the supervisor or ``hastream fault restart``
    metrics_port: int = 0  # where it serves /metrics ($HASTREAM_METRICS_PORT); 0: none
    login: str = ""  # key of its SASL login in the deployment's credentials (``access``); "": none


@dataclass
class Deployment:
    name: str
    spec_path: str
    bootstrap: str
    kafka_dir: str | None = None  # set when ``up`` started the broker itself
    processes: list[Process] = field(default_factory=list)
    supervisor: int = 0  # pid of the process that starts and restarts the services
    started: float = 0.0  # wall-clock time of ``up``, to tell the most recent deployment
    sasl: bool = False  # each service logs in as its own user (``credentials.json`` in its dir)

    HELD = "held"  # <dir>/held/<role>: fault injection keeps the role down
    RESTART = "restart"  # <dir>/restart/<role>: start the role again now (kill it first if it runs)

    @staticmethod
    def dir_for(name: str) -> Path:
        return hastream_home() / "deployments" / name

    @property
    def dir(self) -> Path:
        return self.dir_for(self.name)

    def logins(self) -> dict[str, Login]:
        """The SASL logins of its services and the admin's, by key (none without SASL)."""
        return access.load_logins(self.dir) if self.sasl else {}

    def save(self) -> None:
        """Write the state file whole (readers never see half of it)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f"deployment.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.dir / "deployment.json")

    @classmethod
    def load(cls, name: str) -> Deployment:
        f = cls.dir_for(name) / "deployment.json"
        if not f.exists():
            raise LookupError(f"no deployment '{name}' (start one with: hastream up SPEC)")
        d = json.loads(f.read_text())
        d["processes"] = [Process(**p) for p in d["processes"]]
        return cls(**d)

    @classmethod
    def all(cls) -> list[Deployment]:
        """Every recorded deployment, running or stopped (a record that cannot be read is left out)."""
        root = hastream_home() / "deployments"
        found = []
        for p in sorted(root.glob("*/deployment.json")):
            try:
                found.append(cls.load(p.parent.name))
            except (LookupError, ValueError, TypeError, KeyError):
                continue
        return found

    def alive(self, p: Process) -> bool:
        return p.pid > 0 and processes.pid_alive(p.pid)

    def supervised(self) -> bool:
        """Whether this deployment's supervisor runs (it restarts crashed services)."""
        return self.supervisor > 0 and processes.pid_alive(self.supervisor)

    def running(self) -> bool:
        """Whether anything of the deployment runs: its supervisor or any of its services."""
        return self.supervised() or any(self.alive(p) for p in self.processes)

    # -- requests to the supervisor: a marker file per role ---------------------------
    def _marker(self, kind: str, role: str) -> Path:
        return self.dir / kind / role

    def hold(self, role: str) -> None:
        """Keep ``role`` down when it ends: a fault kill that lasts until ``request_restart``."""
        self._marker(self.HELD, role).parent.mkdir(parents=True, exist_ok=True)
        self._marker(self.HELD, role).touch()

    def held(self, role: str) -> bool:
        return self._marker(self.HELD, role).exists()

    def release(self, role: str) -> None:
        self._marker(self.HELD, role).unlink(missing_ok=True)

    def request_restart(self, role: str) -> None:
        """Ask the supervisor to start ``role`` again at once, held or not, killing it first if it runs."""
        self._marker(self.RESTART, role).parent.mkdir(parents=True, exist_ok=True)
        self._marker(self.RESTART, role).touch()

    def take_restart_request(self, role: str) -> bool:
        """Whether a restart of ``role`` was asked for; consumes the request and lifts any hold."""
        try:
            self._marker(self.RESTART, role).unlink()
        except FileNotFoundError:
            return False
        self.release(role)
        return True

    def clear_requests(self) -> None:
        for kind in (self.HELD, self.RESTART):
            for f in (self.dir / kind).glob("*"):
                f.unlink(missing_ok=True)
