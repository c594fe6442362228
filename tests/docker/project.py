"""A compose project of the tests: docker-compose.yml (and its SASL option) with the broker's
stand-in (standin.compose.yml), under a project name of its own, and what the tests do to it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.docker.cli import docker, docker_env
from infra.docker.standins import StandIns
from tests.compose import COMPOSE
from tests.integration.helpers import wait_for

NAME = "hastream-compose-test"  # not the demo's own name: a user's running demo is left alone
STANDIN = Path(__file__).with_name("standin.compose.yml")


@dataclass
class Project:
    images: StandIns
    overrides: tuple[Path, ...] = ()
    env_file: Path | None = None
    env: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.env = docker_env({"HASTREAM_PYTHON_IMAGE": self.images.python})

    def __call__(self, *args: str | Path, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``docker compose ARGS`` on this project."""
        files = [a for f in (COMPOSE, *self.overrides, STANDIN) for a in ("-f", f)]
        env_file: list[str | Path] = ["--env-file", self.env_file] if self.env_file else []
        return docker(["compose", "-p", NAME, *files, *env_file, *args], self.env, timeout, check)

    def state(self, service: str) -> dict[str, Any]:
        """The container's state (Docker's), with its RestartCount."""
        cid = self("ps", "-aq", service).stdout.split()[0]
        out = docker(["inspect", "-f", "{{json .State}} {{.RestartCount}}", cid], self.env).stdout
        state, restarts = out.rsplit(" ", 1)
        return {**json.loads(state), "RestartCount": int(restarts)}

    def crash(self, service: str) -> None:
        """kill -9 of the service's process, as a crash: Docker's restart policy restarts it
        (``docker compose kill`` would be a manual stop, which the policy leaves down)."""
        os.kill(self.state(service)["Pid"], signal.SIGKILL)

    def wait_restarted(self, service: str, restarts: int, timeout: float = 60) -> None:
        def restarted() -> bool:
            state = self.state(service)
            return state["RestartCount"] >= restarts and bool(state["Running"])

        wait_for(restarted, timeout, f"Docker to restart {service}", interval=0.5)

    def exit_codes(self) -> dict[str, int]:
        """Every service's container: its exit code once stopped (-1 while it runs)."""
        rows = self("ps", "-a", "--format", "json").stdout.splitlines()
        return {s["Service"]: s["ExitCode"] if s["State"] == "exited" else -1 for s in map(json.loads, rows)}

    def remains(self) -> list[str]:
        """Containers, volumes and networks of the project that still exist."""
        label = f"label=com.docker.compose.project={NAME}"
        return [
            line
            for kind in (["ps", "-a"], ["volume", "ls"], ["network", "ls"])
            for line in docker([*kind, "-q", "--filter", label], self.env).stdout.split()
        ]
