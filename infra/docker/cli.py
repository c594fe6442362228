"""The docker CLI as the image and compose tests run it: its environment, whether an engine and
the compose plugin answer, and one command whose failure is one line."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from services.core.errors import HastreamError
from services.core.paths import REPO_ROOT


class DockerError(HastreamError, RuntimeError):
    """A docker command failed; the message is its last lines."""


def docker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for docker commands. Without the buildx plugin a current docker CLI refuses
    to build with BuildKit, so builds take the classic builder, which the Dockerfiles need nothing
    beyond."""
    env = {**os.environ, **(extra or {})}
    if "DOCKER_BUILDKIT" not in env and not _has_buildx():
        env["DOCKER_BUILDKIT"] = "0"
    return env


@functools.cache
def _has_buildx() -> bool:
    """Asked once per process: every docker command takes its environment from docker_env."""
    return _answers(["docker", "buildx", "version"], os.environ)


def engine_problem() -> str | None:
    """Why the image and compose tests cannot run here, in one line; None when they can."""
    env = docker_env()
    if not _answers(["docker", "info"], env):
        return "no Docker engine answers (`make docker` installs and starts one, as root)"
    if not _answers(["docker", "compose", "version"], env):
        return "docker has no compose v2 plugin (`make docker` builds it)"
    return None


def docker(
    args: Sequence[str | Path],
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``docker ARGS`` from the repository root; with ``check``, a failure raises its last lines."""
    return run(["docker", *args], env, timeout, check)


def run(
    cmd: Sequence[str | Path],
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """A command of the engine's (docker, a script of infra/docker) from the repository root, its
    output captured; with ``check``, a failure raises its last lines."""
    r = subprocess.run(
        [str(c) for c in cmd],
        env=dict(env) if env is not None else docker_env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and r.returncode != 0:
        lines = [line.strip() for line in (r.stderr.strip() or r.stdout).splitlines() if line.strip()]
        tail = " | ".join(lines[-3:])
        words = " ".join(Path(str(c)).name if i == 0 else str(c) for i, c in enumerate(cmd[:3]))
        raise DockerError(f"{words} ... failed ({r.returncode}): {tail}")
    return r


def _answers(cmd: list[str], env: Mapping[str, str]) -> bool:
    try:
        return subprocess.run(cmd, env=dict(env), capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
