"""The image and compose tests need a Docker engine with the compose v2 plugin (`make docker`
installs and starts one, as root). Without one they are skipped with the reason, unless
HASTREAM_DOCKER=required, as in CI, where a missing engine fails them."""

from __future__ import annotations

import os

import pytest

from infra.docker.cli import engine_problem
from infra.docker.standins import StandIns, ensure_standins


@pytest.fixture(scope="session")
def standins() -> StandIns:
    """The stand-ins for the registry's images, built once a Docker engine answers."""
    problem = engine_problem()
    if problem is not None:
        if os.environ.get("HASTREAM_DOCKER") == "required":
            pytest.fail(f"HASTREAM_DOCKER=required, but {problem}")
        pytest.skip(problem)
    return ensure_standins()
