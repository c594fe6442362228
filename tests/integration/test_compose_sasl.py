"""docker-compose.sasl.yml on a real broker, without Docker: the kafka service's environment
rendered as the apache/kafka image renders it and started through infra/compose/kafka-sasl.sh,
the ``.env`` that ``hastream logins`` writes, and the topics service's provisioning run as
compose runs it. Only the hosts and ports are made local."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from infra.kafka.cluster import MAIN_CLASS, STORAGE_TOOL_CLASS, _free_ports, ensure_kafka_jars, java_binary
from services.core.admin import admin_client
from services.core.login import PASSWORD_ENV, PROTOCOL_ENV, USERNAME_ENV, Login
from services.core.paths import REPO_ROOT
from services.deploy import access
from services.spec import load_spec
from tests.compose import COMPOSE, SASL, image_properties, interpolated, services
from tests.integration.helpers import hastream, user_env, write

pytestmark = pytest.mark.integration

SCRIPT = REPO_ROOT / "infra" / "compose" / "kafka-sasl.sh"
DEMO = REPO_ROOT / "examples" / "demo.yaml"
PORTS = (9092, 9093, 29092)  # the kafka service's listeners: SASL_PLAINTEXT (services), CONTROLLER, HOST


def compose_env(service: str, dotenv: Mapping[str, str]) -> dict[str, str]:
    """A service's environment with the SASL override, as compose merges and interpolates it."""
    return interpolated(services(COMPOSE, SASL)[service]["environment"], dotenv)


def localized(env: dict[str, str], ports: dict[int, int], data: Path) -> dict[str, str]:
    """The kafka service's environment on this machine: every listener on 127.0.0.1 at a free port."""

    def local(value: str) -> str:
        return re.sub(r"(//|@)(kafka|localhost)?:(\d+)", lambda m: f"{m[1]}127.0.0.1:{ports[int(m[3])]}", value)

    out = {k: local(v) for k, v in env.items()}
    out["KAFKA_LOG_DIRS"] = str(data)
    return out


def image_run() -> None:
    """Stands in for the image's /etc/kafka/docker/run: render the environment and start the broker."""
    props = Path(os.environ["TMPDIR"]) / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in image_properties(os.environ).items()))
    java = java_binary()
    os.execv(java, [java, "-Xmx384m", "-cp", f"{ensure_kafka_jars()}/*", MAIN_CLASS, str(props)])


def _stand_ins(tmp: Path) -> dict[str, str]:
    """The image's kafka-storage.sh and start-up, run from this checkout's jars and Python."""
    bin_dir = tmp / "kafka" / "bin"
    bin_dir.mkdir(parents=True)
    storage = bin_dir / "kafka-storage.sh"
    storage.write_text(
        f'#!/usr/bin/env bash\nexec "{java_binary()}" -cp "{ensure_kafka_jars()}/*" {STORAGE_TOOL_CLASS} "$@"\n'
    )
    run = tmp / "run"
    run.write_text(
        f'#!/usr/bin/env bash\ncd "{REPO_ROOT}"\n'
        f'exec "{sys.executable}" -c "from tests.integration.test_compose_sasl import image_run; image_run()"\n'
    )
    for f in (storage, run):
        f.chmod(0o755)
    return {"KAFKA_HOME": str(tmp / "kafka"), "KAFKA_IMAGE_RUN": str(run), "TMPDIR": str(tmp)}


def admits(bootstrap: str, login: Login | None) -> bool:
    """Whether the broker answers a metadata request of a client with ``login`` (None: no login)."""
    with access.acting_as(login or Login("", "")):  # an empty user name: no SASL at all
        try:
            admin_client(bootstrap).list_topics(timeout=3)
            return True
        except KafkaException:
            return False


class ComposeBroker:
    """The compose kafka service, started by its SASL script on a local JVM."""

    def __init__(self, tmp: Path, dotenv: Mapping[str, str]) -> None:
        self.ports = dict(zip(PORTS, _free_ports("127.0.0.1", 3), strict=True))
        env = localized(compose_env("kafka", dotenv), self.ports, tmp / "data")
        self.log = tmp / "broker.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                ["bash", str(SCRIPT)],
                env={"PATH": os.environ["PATH"], **env, **_stand_ins(tmp)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def bootstrap(self, port: int) -> str:
        return f"127.0.0.1:{self.ports[port]}"

    def wait_ready(self, admin: Login, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not admits(self.bootstrap(9092), admin):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the broker did not start:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[ComposeBroker, dict[str, str]]]:
    env_file = tmp_path / ".env"
    r = hastream("logins", str(DEMO), "--env-file", str(env_file), env=user_env(tmp_path / "home"))
    assert r.returncode == 0, r.stderr
    dotenv = access.read_env_file(env_file)
    b = ComposeBroker(tmp_path, dotenv)
    try:
        b.wait_ready(Login("admin", dotenv[access.password_var(access.ADMIN)]))
        yield b, dotenv
    finally:
        b.stop()


def test_the_compose_broker_takes_only_logins_and_each_service_only_its_own_topics(
    broker: tuple[ComposeBroker, dict[str, str]],
) -> None:
    b, dotenv = broker
    admin = Login("admin", dotenv[access.password_var(access.ADMIN)])
    assert admits(b.bootstrap(29092), admin), "the host listener takes the admin's login"
    assert not admits(b.bootstrap(29092), None), "no listener takes a client without a login"
    assert not admits(b.bootstrap(9092), Login("admin", "wrong")), "nor a wrong password"

    # The topics service, as compose runs it: its command, its environment.
    topics_env = compose_env("topics", dotenv) | {"HASTREAM_BOOTSTRAP": b.bootstrap(9092)}
    code = services(SASL)["topics"]["command"][0]
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **topics_env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "granted: " in r.stdout, r.stderr[-3000:]

    # A node service's login, from its compose environment: its own output yes, another node's no.
    ingest = compose_env("ingest-r0-p0", dotenv)
    login = Login(ingest[USERNAME_ENV], ingest[PASSWORD_ENV], ingest[PROTOCOL_ENV])
    write(b.bootstrap(9092), login, "demo.hot.r0")
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED|Topic authorization failed"):
        write(b.bootstrap(9092), login, "demo.alerts.r0")

    # From the host, as the override's header says: the source's login writes its stream.
    key = access.source_key(load_spec(DEMO), "readings")  # an ingress stream: its raw topic's writer
    source = {USERNAME_ENV: access.usernames(load_spec(DEMO))[key], PASSWORD_ENV: dotenv[access.password_var(key)]}
    r = hastream(
        "produce",
        str(DEMO),
        "readings",
        "--count",
        "20",
        "--bootstrap",
        b.bootstrap(29092),
        env={**user_env(b.log.parent / "home"), **source},
        timeout=120,
    )
    assert r.returncode == 0 and "produced 20" in r.stdout, r.stderr[-3000:]
