"""The Dockerfile builds on a real Docker engine, and its image runs the `hastream` CLI as its own
user, with a home it can write (HASTREAM_HOME: local state such as a deployment's records)."""

from __future__ import annotations

import pytest

from infra.docker.cli import docker, docker_env
from infra.docker.standins import StandIns

pytestmark = pytest.mark.docker

IMAGE = "hastream-test/image:0.1.0"  # not compose's hastream:0.1.0, which this leaves as it is


def test_the_image_builds_and_runs_the_cli_as_its_own_user(standins: StandIns) -> None:
    env = docker_env()
    docker(["build", "--build-arg", f"PYTHON_IMAGE={standins.python}", "-t", IMAGE, "."], env, timeout=1200)
    try:
        _runs_the_cli_as_its_own_user(env)
    finally:
        docker(["rmi", IMAGE], env, check=False)


def _runs_the_cli_as_its_own_user(env: dict[str, str]) -> None:
    usage = docker(["run", "--rm", IMAGE, "--help"], env).stdout
    assert "Usage: hastream" in usage and "validate" in usage, usage
    valid = docker(["run", "--rm", IMAGE, "validate", "examples/demo.yaml"], env).stdout
    assert valid.startswith("ok examples/demo.yaml: 6 streams, 5 operators, 4 nodes"), valid

    script = 'id -un; echo "$HASTREAM_HOME"; touch "$HASTREAM_HOME/probe" && echo writable'
    who = docker(["run", "--rm", "--entrypoint", "sh", IMAGE, "-c", script], env).stdout.split()
    assert who == ["hastream", "/var/lib/hastream", "writable"], who
