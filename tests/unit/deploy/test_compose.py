"""docker-compose.yml must deploy the demo exactly as the local launcher does.

The local launcher (services/deploy/local.py) is the reference: the compose file has one
service per launcher process, with the same ``hastream`` arguments and environment, and its
broker has the single-broker settings of the embedded cluster (infra/kafka/cluster.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from infra.kafka.cluster import ADMIN_USER, FAILOVER_PROPS, KAFKA_VERSION, SASL_LISTENER, KafkaCluster, _Node
from services.core.login import PASSWORD_ENV, PROTOCOL_ENV, USERNAME_ENV
from services.core.paths import REPO_ROOT
from services.deploy import access
from services.deploy.local import service_commands, service_env
from services.spec import load_spec
from tests.compose import COMPOSE, SASL, VARIABLE, environment, image_properties, services

DOCKERFILE = REPO_ROOT / "Dockerfile"
DEMO = Path("examples/demo.yaml")  # relative: the image's working directory is the repository root
CLI_MODULE = ["-m", "services.cli.main"]  # what the `hastream` entrypoint runs


def _dockerfile_final_stage() -> list[str]:
    """Instruction lines of the Dockerfile's last stage (the image compose runs)."""
    lines = [ln.strip() for ln in DOCKERFILE.read_text().splitlines()]
    starts = [i for i, ln in enumerate(lines) if ln.upper().startswith("FROM ")]
    return [ln for ln in lines[starts[-1] :] if ln and not ln.startswith("#")]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def sasl() -> dict[str, dict[str, Any]]:
    """The services of docker-compose.yml with the SASL override merged in."""
    return services(COMPOSE, SASL)


@pytest.fixture(scope="module")
def launcher() -> dict[str, list[str]]:
    """Role -> argv of every process ``hastream up examples/demo.yaml`` starts."""
    spec = load_spec(REPO_ROOT / DEMO)
    return dict(service_commands(spec, DEMO))


@pytest.fixture(scope="module")
def node_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Compose services that run a launcher process (``hastream node run ...``, ``hastream coordinator ...``,
    ``hastream egress ...``), each labelled with its launcher role."""
    return {
        name: svc
        for name, svc in compose["services"].items()
        if isinstance(svc.get("command"), list)
        and (svc["command"][:2] == ["node", "run"] or svc["command"][:1] in (["coordinator"], ["egress"]))
    }


@pytest.fixture(scope="module")
def internal_bootstrap(compose: dict[str, Any]) -> str:
    """host:port of the broker's inter-broker (internal) listener as advertised inside compose."""
    env = environment(compose["services"]["kafka"])
    name = env.get("KAFKA_INTER_BROKER_LISTENER_NAME", "PLAINTEXT")
    advertised = dict(entry.split("://", 1) for entry in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    return advertised[name]


def test_demo_runs_only_hastream_cli_processes(launcher: dict[str, list[str]]) -> None:
    # Compose services run the `hastream` entrypoint; a Spark node in the demo would need its own mapping here.
    for role, argv in launcher.items():
        assert argv[1:3] == CLI_MODULE, f"{role} is not a hastream CLI process: {argv}"


def test_one_compose_service_per_launcher_process(
    launcher: dict[str, list[str]], node_services: dict[str, dict[str, Any]]
) -> None:
    roles = {svc.get("labels", {}).get("hastream.role") for svc in node_services.values()}
    assert roles == set(launcher)
    for name, svc in node_services.items():
        assert name == svc["labels"]["hastream.role"].replace(".", "-")


def test_services_run_the_launchers_arguments(
    launcher: dict[str, list[str]], node_services: dict[str, dict[str, Any]]
) -> None:
    by_role = {svc["labels"]["hastream.role"]: svc for svc in node_services.values()}
    for role, argv in launcher.items():
        svc = by_role[role]
        assert [str(a) for a in svc["command"]] == argv[3:], role
        assert svc.get("entrypoint") in (None, ["hastream"]), f"{role} must run the hastream entrypoint"


def test_coordinator_status_page_is_published(compose: dict[str, Any], launcher: dict[str, list[str]]) -> None:
    from services.coordinator.address import DEFAULT_PORT

    assert "coordinator" in launcher
    svc = compose["services"]["coordinator"]
    assert f"127.0.0.1:{DEFAULT_PORT}:{DEFAULT_PORT}" in [str(p) for p in svc.get("ports", [])], "host loopback only"
    assert environment(svc)["HASTREAM_STATUS_HOST"] == "0.0.0.0", "the container's port must reach the page"


def test_every_service_serves_metrics_as_the_launcher_gives_it(node_services: dict[str, dict[str, Any]]) -> None:
    from services.core import metrics

    for name, svc in node_services.items():
        env = environment(svc)
        assert int(env[metrics.PORT_ENV]) >= metrics.BASE_PORT, name
        assert env[metrics.HOST_ENV] == "0.0.0.0", f"{name}: other containers must reach /metrics"


def test_image_entrypoint_is_hastream() -> None:
    entrypoints = [ln for ln in _dockerfile_final_stage() if ln.upper().startswith("ENTRYPOINT")]
    assert entrypoints and json.loads(entrypoints[-1].split(None, 1)[1]) == ["hastream"]


def test_services_get_the_launchers_environment(
    node_services: dict[str, dict[str, Any]], internal_bootstrap: str
) -> None:
    with mock.patch.dict(os.environ, {}, clear=True):
        expected = service_env(internal_bootstrap)  # only what the launcher itself sets
    workdir = [ln.split(None, 1)[1] for ln in _dockerfile_final_stage() if ln.upper().startswith("WORKDIR")]
    for name, svc in node_services.items():
        env = environment(svc)
        assert set(expected) <= set(env), f"{name} lacks {set(expected) - set(env)}"
        assert env["HASTREAM_BOOTSTRAP"] == internal_bootstrap, name
        assert env["PYTHONUNBUFFERED"] == expected["PYTHONUNBUFFERED"], name
        # The launcher puts the repository root first on PYTHONPATH; in the image that is the working directory.
        assert env["PYTHONPATH"].split(os.pathsep)[0] == (workdir[-1] if workdir else "/app"), name


def test_bootstrap_names_the_kafka_service(compose: dict[str, Any], internal_bootstrap: str) -> None:
    host = internal_bootstrap.rsplit(":", 1)[0]
    kafka = compose["services"]["kafka"]
    assert host in ("kafka", kafka.get("hostname")), internal_bootstrap
    listeners = environment(kafka)["KAFKA_LISTENERS"]
    assert (
        f"://:{internal_bootstrap.rsplit(':', 1)[1]}" in listeners
        or f"://0.0.0.0:{internal_bootstrap.rsplit(':', 1)[1]}" in listeners
    )


def test_kafka_image_matches_the_pinned_broker_version(compose: dict[str, Any]) -> None:
    image = compose["services"]["kafka"]["image"]
    repo, _, tag = image.rpartition(":")
    assert repo == "apache/kafka"
    assert tag == KAFKA_VERSION


def test_broker_runs_kraft_single_node(compose: dict[str, Any]) -> None:
    env = environment(compose["services"]["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@")
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]


def test_broker_replication_matches_the_local_single_broker(compose: dict[str, Any], tmp_path: Path) -> None:
    """Every replication / min-ISR setting of the embedded 1-broker cluster is set the same way."""
    cluster = KafkaCluster(brokers=1, data_dir=tmp_path)
    node = _Node(0, 9092, 9093, tmp_path / "broker-0")
    cluster._nodes = [node]
    props = dict(
        ln.split("=", 1) for ln in cluster._server_properties(node).splitlines() if ln and not ln.startswith("#")
    )
    keys = [k for k in props if k.endswith(("replication.factor", ".min.isr")) or k == "min.insync.replicas"]
    assert {
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    } <= set(keys)
    env = environment(compose["services"]["kafka"])
    for k in keys:
        var = "KAFKA_" + k.upper().replace(".", "_")
        assert env.get(var) == props[k] == "1", f"{var}: compose {env.get(var)!r}, local launcher {props[k]!r}"


def _properties(cluster: KafkaCluster, tmp_path: Path) -> dict[str, str]:
    node = _Node(0, 9092, 9093, tmp_path / "broker-0")
    cluster._nodes = [node]
    return dict(ln.split("=", 1) for ln in cluster._server_properties(node).splitlines() if "=" in ln)


def test_several_brokers_fail_over_fast_and_a_single_one_keeps_kafkas_own_session(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """Fail-over settings fit a broker fail-over inside X (docs/dpc.md); a single broker has none to fail
    over to, and a 1 s session on a loaded machine timed out its own heartbeats: the launcher's single
    broker and compose's leave Kafka's defaults."""
    several = _properties(KafkaCluster(brokers=3, data_dir=tmp_path), tmp_path)
    assert {k: several[k] for k in FAILOVER_PROPS} == {k: str(v) for k, v in FAILOVER_PROPS.items()}
    single = _properties(KafkaCluster(brokers=1, data_dir=tmp_path), tmp_path)
    assert not set(FAILOVER_PROPS) & set(single)
    env = environment(compose["services"]["kafka"])
    assert not {"KAFKA_" + k.upper().replace(".", "_") for k in FAILOVER_PROPS} & set(env)


def test_a_cluster_sized_for_a_loaded_machine_changes_only_the_failover_settings_it_names(tmp_path: Path) -> None:
    """``failover=`` overrides those ``FAILOVER_PROPS`` it names in every broker's properties and keeps the rest."""
    props = _properties(
        KafkaCluster(brokers=3, data_dir=tmp_path, failover={"broker.session.timeout.ms": 4000}), tmp_path
    )
    assert props["broker.session.timeout.ms"] == "4000"
    others = {k: str(v) for k, v in FAILOVER_PROPS.items() if k != "broker.session.timeout.ms"}
    assert {k: props[k] for k in others} == others


def test_services_start_after_topics_exist(compose: dict[str, Any], node_services: dict[str, dict[str, Any]]) -> None:
    services = compose["services"]
    topics = services["topics"]
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "healthcheck" in services["kafka"]
    script = " ".join(topics.get("command") or [])
    assert "provision" in script and str(DEMO) in script
    assert topics.get("restart", "no") == "no"
    for name, svc in node_services.items():
        assert svc["depends_on"]["topics"]["condition"] == "service_completed_successfully", name


def test_the_sasl_option_logs_each_service_in_as_the_launcher_would(
    node_services: dict[str, dict[str, Any]], sasl: dict[str, dict[str, Any]]
) -> None:
    """Every service of the demo gets the login ``hastream up --sasl`` gives its process, and only
    its own password (one ``.env`` variable per login)."""
    spec = load_spec(REPO_ROOT / DEMO)
    users = access.usernames(spec)
    overridden = set(yaml.safe_load(SASL.read_text())["services"]) - {"kafka", "topics"}
    assert overridden == set(node_services), "every node service and the coordinator, nothing else"
    for name, svc in node_services.items():
        key = access.login_key(spec, svc["labels"]["hastream.role"])
        env = environment(sasl[name])
        assert env[USERNAME_ENV] == users[key], name
        assert [m[1] for m in VARIABLE.finditer(env[PASSWORD_ENV])] == [access.password_var(key)], name
        assert env[PROTOCOL_ENV] == SASL_LISTENER, name
        assert not [v for v in env.values() if access.password_var(access.ADMIN) in v], f"{name} sees the admin's"


def test_the_sasl_topics_service_grants_every_login_as_the_admin(sasl: dict[str, dict[str, Any]]) -> None:
    spec = load_spec(REPO_ROOT / DEMO)
    topics = sasl["topics"]
    env = environment(topics)
    assert env[USERNAME_ENV] == ADMIN_USER
    wanted = {access.password_var(k) for k in access.usernames(spec)}
    assert {m[1] for v in env.values() for m in VARIABLE.finditer(v)} == wanted | {access.password_var(access.ADMIN)}
    script = " ".join(topics["command"])
    assert "compose_logins" in script and "provision" in script and str(DEMO) in script


def test_hastream_logins_writes_every_variable_the_sasl_option_reads() -> None:
    spec = load_spec(REPO_ROOT / DEMO)
    read = {m[1] for m in VARIABLE.finditer(SASL.read_text())}
    assert read == set(access.compose_passwords(spec, {}))


def test_the_sasl_broker_has_the_launchers_sasl_settings_on_every_client_listener(
    sasl: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The compose broker's SASL properties are those of ``hastream kafka start --sasl``
    (infra/kafka/cluster.py), with the HOST listener set like the services' listener."""
    cluster = KafkaCluster(brokers=1, data_dir=tmp_path, sasl=True)
    node = _Node(0, 9092, 9093, tmp_path / "broker-0")
    cluster._nodes = [node]
    with mock.patch.object(KafkaCluster, "admin_login", return_value=(ADMIN_USER, "PW")):
        launcher = {k: str(v) for k, v in cluster._sasl_properties(node).items()}
    admin_var = access.password_var(access.ADMIN)
    env = {k: v.replace(f"${{{admin_var}}}", "PW") for k, v in environment(sasl["kafka"]).items()}
    props = image_properties(env)
    listeners = {entry.split("://")[0] for entry in props["listeners"].split(",")}
    assert listeners == {SASL_LISTENER, "CONTROLLER", "HOST"}
    protocols = dict(pair.split(":") for pair in props["listener.security.protocol.map"].split(","))
    assert protocols == dict.fromkeys(listeners, "SASL_PLAINTEXT"), "no listener without a login"
    for k, v in launcher.items():
        if k in ("listeners", "advertised.listeners", "listener.security.protocol.map"):
            continue
        assert props.get(k) == v, f"{k}: compose {props.get(k)!r}, launcher {v!r}"
        if k.startswith(f"listener.name.{SASL_LISTENER.lower()}."):
            host = k.replace(SASL_LISTENER.lower(), "host", 1)
            assert props.get(host) == v, f"{host}: the HOST listener must take the same logins"
    assert "${" not in env["KAFKA_OPTS"] and env.get("HASTREAM_PASSWORD_ADMIN", "").startswith("${")


def _compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    try:
        ok = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [docker, "compose"] if ok else None


def test_docker_compose_accepts_the_file() -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("docker compose is not installed")
    proc = subprocess.run(
        [*cli, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    spec = load_spec(REPO_ROOT / DEMO)
    dotenv = {**os.environ, **access.compose_passwords(spec, {})}
    proc = subprocess.run(
        [*cli, "-f", str(COMPOSE), "-f", str(SASL), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=dotenv,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
