"""The broker stand-in of the compose tests (infra/docker/kafka/run, in place of the apache/kafka
image's start-up) renders the kafka service's environment into the broker properties the image
makes of it (``tests.compose.image_properties``, which tests/integration/test_compose_sasl.py runs
on a real broker), formats the storage once, and starts the broker with them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from services.core.paths import REPO_ROOT
from tests.compose import COMPOSE, SASL, image_properties, interpolated, services

RUN = REPO_ROOT / "infra" / "docker" / "kafka" / "run"
TOOLS = ("kafka-storage.sh", "kafka-run-class.sh")


def start(tmp: Path, env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Run the start-up with the image's tools replaced by scripts that log their arguments:
    the properties it wrote, and the tools it called."""
    home, calls = tmp / "kafka", tmp / "calls"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    (home / "config").mkdir(exist_ok=True)
    for tool in TOOLS:
        script = home / "bin" / tool
        script.write_text(f'#!/usr/bin/env bash\necho "{tool} $*" >> "{calls}"\n')
        script.chmod(0o755)
    calls.unlink(missing_ok=True)
    subprocess.run(["bash", RUN], env={"PATH": os.environ["PATH"], **env, "KAFKA_HOME": str(home)}, check=True)
    lines = (home / "config" / "server.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines), calls.read_text().splitlines()


@pytest.mark.parametrize("files", [(COMPOSE,), (COMPOSE, SASL)], ids=["plain", "sasl"])
def test_the_standin_renders_the_compose_environment_as_the_image_does(tmp_path: Path, files: tuple[Path]) -> None:
    env = interpolated(services(*files)["kafka"]["environment"], {"HASTREAM_PASSWORD_ADMIN": "secret"})
    env["KAFKA_LOG_DIRS"] = str(tmp_path / "data")
    props, calls = start(tmp_path, env)
    assert props == image_properties(env)
    assert props["listeners"] == env["KAFKA_LISTENERS"] and props["node.id"] == "1"
    config = tmp_path / "kafka" / "config" / "server.properties"
    assert calls == [
        f"kafka-storage.sh format --cluster-id={env['CLUSTER_ID']} --config {config}",
        f"kafka-run-class.sh kafka.Kafka {config}",
    ]


def test_formatted_storage_is_kept(tmp_path: Path) -> None:
    """A restarted container finds its volume formatted: the broker starts on it as it is."""
    env = interpolated(services(COMPOSE)["kafka"]["environment"], {})
    env["KAFKA_LOG_DIRS"] = str(tmp_path / "data")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.properties").write_text("version=1\n")
    _, calls = start(tmp_path, env)
    assert [c.split()[0] for c in calls] == ["kafka-run-class.sh"]
