"""SASL/SCRAM logins and per-service ACLs on the real broker (``hastream kafka start --sasl``,
``hastream up --sasl``): a wrong password is refused in one line, a node cannot write another
node's output nor read what is not its input, and a whole deployment works with only its ACLs."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from infra.kafka.cluster import KafkaCluster
from services.client.source import SourceWriter
from services.client.workload import readings
from services.core.kafka import BatchConsumer, group_id, plain_consumer
from services.core.login import PASSWORD_ENV, USERNAME_ENV, Login
from services.core.partitioner import key_bytes, partition_for
from services.deploy import access
from services.deploy.deployment import Deployment
from services.operators.reference import evaluate
from services.spec import Spec
from services.spec.plan import plan_node
from tests.integration.helpers import CHAIN as DEPLOY_CHAIN
from tests.integration.helpers import create_topics, hastream, one_error_line, unique_spec, write

pytestmark = pytest.mark.integration

TWO_NODES = """\
name: acc-{u}
defaults: {partitions: 1}
streams:
  src_{u}: {schema: reading, key: sensor}
  mid_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  warm: {type: filter, input: src_{u}, output: mid_{u}, where: "value >= 25"}
  keep: {type: filter, input: mid_{u}, output: out_{u}, where: "value < 90"}
nodes:
  n1: {operators: [warm]}
  n2: {operators: [keep]}
"""

CHAIN = DEPLOY_CHAIN.replace("name: chain-", "name: sasl-").replace(
    "first: {operators: [warm]}", "first: {operators: [warm], replicas: 2}"
)


@dataclass
class SaslHome:
    """A HASTREAM_HOME whose embedded broker takes SASL logins only (started here, stopped at the end)."""

    home: Path
    cluster: KafkaCluster

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def admin(self) -> Login:
        return Login(*self.cluster.admin_login())

    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "HASTREAM_HOME": str(self.home), "COLUMNS": "250", **extra}
        for name in ("HASTREAM_BOOTSTRAP", USERNAME_ENV, PASSWORD_ENV, "HASTREAM_SASL"):
            if name not in extra:
                env.pop(name, None)
        return env


@pytest.fixture(scope="module")
def sasl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslHome]:
    home = tmp_path_factory.mktemp("sasl-home")
    cluster = KafkaCluster(brokers=1, data_dir=home / "kafka", sasl=True).start()
    try:
        yield SaslHome(home, cluster)
    finally:
        hastream("down", env=SaslHome(home, cluster).env(), timeout=120)
        cluster.stop()


def provisioned(sasl: SaslHome, tmp_path: Path, template: str) -> tuple[Spec, dict[str, Login]]:
    """A spec's topics, users and ACLs on the SASL broker, made as its admin (no services started)."""
    spec, _ = unique_spec(template, tmp_path)
    logins = access.new_logins(spec, sasl.admin)
    with access.acting_as(sasl.admin):
        create_topics(spec, sasl.bootstrap)
    access.provision(spec, sasl.bootstrap, logins)
    return spec, logins


def read(bootstrap: str, login: Login, topic: str, wait_s: float) -> list[Message]:
    """What ``login`` reads of partition 0 of ``topic`` within ``wait_s``."""
    with access.acting_as(login):
        c = plain_consumer(bootstrap, "access-test", unique=True)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[Message] = []
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not got:
            got = [m for m in c.consume(100, 0.2) if m.error() is None]
        return got
    finally:
        c.close()


def test_a_wrong_password_is_refused_in_one_line(sasl: SaslHome, tmp_path: Path) -> None:
    spec, logins = provisioned(sasl, tmp_path, TWO_NODES)
    u = spec.name.split("-")[1]
    path = tmp_path / "spec.yaml"
    env = sasl.env(HASTREAM_BOOTSTRAP=sasl.bootstrap)
    source = logins[access.source_key(spec, f"src_{u}")]
    wrong = {USERNAME_ENV: source.username, PASSWORD_ENV: source.password + "x"}

    r = hastream("produce", str(path), f"src_{u}", "--count", "10", env={**env, **wrong}, timeout=60)
    one_error_line(r, f"refused the login of user '{source.username}'")
    assert "invalid credentials" in r.stderr
    nobody = {USERNAME_ENV: "nobody", PASSWORD_ENV: "x"}
    r = hastream("tail", str(path), f"src_{u}", "--idle", "2", env={**env, **nobody}, timeout=60)
    one_error_line(r, "refused the login of user 'nobody'")
    r = hastream("tail", str(path), f"src_{u}", "--idle", "2", env={**env, USERNAME_ENV: "nobody"}, timeout=60)
    one_error_line(r, "sasl.username and sasl.password must be set")
    r = hastream("tail", str(path), f"src_{u}", "--idle", "2", env=env, timeout=60)
    one_error_line(r, "accepts connections but closes them")

    # The right password works, through the same command.
    ok = {USERNAME_ENV: source.username, PASSWORD_ENV: source.password}
    r = hastream("produce", str(path), f"src_{u}", "--count", "10", env={**env, **ok}, timeout=60)
    assert r.returncode == 0 and "produced 10" in r.stdout, r.stderr


def test_a_node_cannot_write_another_nodes_output_nor_read_what_is_not_its_input(
    sasl: SaslHome, tmp_path: Path
) -> None:
    spec, logins = provisioned(sasl, tmp_path, TWO_NODES)
    u = spec.name.split("-")[1]
    n1, n2 = logins[access.node_key("n1", 0)], logins[access.node_key("n2", 0)]
    mid, out, src = spec.topic(f"mid_{u}"), spec.topic(f"out_{u}"), spec.topic(f"src_{u}")
    assert (mid, out) == (f"{spec.name}.mid_{u}.r0", f"{spec.name}.out_{u}.r0")

    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        write(sasl.bootstrap, n2, mid)  # n1's output
    write(sasl.bootstrap, n2, out)  # its own output
    write(sasl.bootstrap, n1, mid)  # n1 writes its own
    assert len(read(sasl.bootstrap, n2, mid, 10)) == 3, "n2 reads its input"

    with access.acting_as(sasl.admin):  # the source stream has data
        writer = SourceWriter(spec, f"src_{u}", sasl.bootstrap)
    for rec in readings(5, seed=1):
        writer.send(rec)
    writer.producer.flush()
    assert len(read(sasl.bootstrap, sasl.admin, src, 10)) > 0
    assert read(sasl.bootstrap, n2, src, 5) == [], "n2 reads nothing of a stream that is not its input"
    with access.acting_as(n2):
        meta = plain_consumer(sasl.bootstrap, "access-test", unique=True).list_topics(src, timeout=10)
    err = meta.topics[src].error
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Nor may it commit offsets in n1's consumer group (which n1 restarts from).
    with access.acting_as(n2):
        c = BatchConsumer(sasl.bootstrap, group_id(plan_node(spec, "n1").service_name(0, 0)))
    try:
        with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
            c.commit([TopicPartition(mid, 0, 1)])
    finally:
        c.close()


def test_a_deployment_with_sasl_and_acls_computes_what_the_reference_does(
    sasl: SaslHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HASTREAM_HOME", str(sasl.home))
    stats = "stats_{u}: {schema: window_stat, key: key}"
    spec, path = unique_spec(CHAIN.replace(stats, stats[:-1] + ", egress: true}"), tmp_path)
    u = spec.name.split("-")[1]
    env = sasl.env()
    records = list(readings(2000, sensors=10, seed=3, step_ms=10))
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    r = hastream("up", str(path), "--sasl", env=env)  # on the home's embedded SASL broker
    assert r.returncode == 0, r.stderr
    assert "9 processes" in r.stdout and "logs in as its own user" in r.stdout  # 2 of them the egress
    dep = Deployment.load(spec.name)
    creds = dep.dir / access.CREDENTIALS_FILE
    assert dep.sasl and creds.stat().st_mode & 0o777 == 0o600
    logins = access.load_logins(dep.dir)
    try:
        for proc in dep.processes:  # each service runs with its own login, and no other
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace").split("\0")
            assert f"{USERNAME_ENV}={logins[proc.login].username}" in environ, proc.role
            assert not any(login.password in line for k, login in logins.items() if k != proc.login for line in environ)
        r = hastream("produce", str(path), f"src_{u}", "--json", str(tmp_path / "in.jsonl"), env=env)
        assert r.returncode == 0, r.stderr
        assert "produced 2000" in r.stdout
        tailed = hastream("tail", str(path), f"stats_{u}", "--json", "--idle", "8", env=env)
        assert tailed.returncode == 0, tailed.stderr
        got = [json.loads(line) for line in tailed.stdout.splitlines() if line.startswith("{")]
        plain = hastream("tail", str(path), f"stats_{u}", "--egress", "stable", "--json", "--idle", "5", env=env)
        assert plain.returncode == 0, plain.stderr
        egressed = [json.loads(line) for line in plain.stdout.splitlines() if line.startswith("{")]
        status = hastream("status", spec.name, env=env)
        assert status.returncode == 0 and status.stdout.count(" yes ") == 9, status.stdout
    finally:
        down = hastream("down", spec.name, env=env)
    assert down.returncode == 0, down.stderr

    inputs: list[list[dict]] = [[], []]
    for rec in records:
        inputs[partition_for(key_bytes(rec["sensor"]), 2)].append(rec)
    want = evaluate(spec, {f"src_{u}": inputs}, ended=True)[f"stats_{u}"]
    assert sum(map(len, want)) > 0
    for p in range(2):
        mine = [t["value"] for t in got if t["partition"] == p]
        assert mine == want[p], f"partition {p} differs from the reference"
        read = [t["value"] for t in egressed if t["partition"] == p]
        assert read == want[p], f"partition {p} of the egress topic differs from the reference"
        assert all(t["type"] == "STABLE" for t in got)
    # Every service did its work with only its own ACLs: the broker denied none of them anything.
    broker_log = sasl.cluster.log_file(0).read_text(errors="replace")
    denied = [line for line in broker_log.splitlines() if "Denied" in line and f"User:{spec.name}." in line]
    assert denied == [], denied[:5]


def test_sasl_against_the_wrong_broker_is_one_line(kafka, sasl: SaslHome, tmp_path: Path) -> None:
    spec, path = unique_spec(TWO_NODES, tmp_path)
    plain = sasl.env()
    r = hastream("up", str(path), "--sasl", "--bootstrap", kafka.bootstrap, env=plain)
    one_error_line(r, "needs its admin login")
    r = hastream(
        "up",
        str(path),
        "--sasl",
        "--bootstrap",
        kafka.bootstrap,
        env=sasl.env(**{USERNAME_ENV: "admin", PASSWORD_ENV: "x"}),
        timeout=60,
    )
    one_error_line(r, "takes no SASL logins on that port")
    r = hastream("up", str(path), "--no-sasl", env=plain)  # the home's broker takes SASL logins only
    one_error_line(r, "takes only SASL logins: deploy with --sasl")

    # A stored broker without SASL is not turned into one by 'kafka start --sasl' (that takes --fresh).
    stored = tmp_path / "plain-kafka"
    stored.mkdir()
    node = {"node_id": 0, "port": 1, "controller_port": 2, "dir": str(stored / "broker-0")}
    state = {"brokers": 1, "host": "127.0.0.1", "pids": [None], "nodes": [node], "cluster_id": "x"}
    (stored / "cluster.json").write_text(json.dumps(state))
    r = hastream("kafka", "start", "--sasl", "--dir", str(stored), env=plain)
    one_error_line(
        r, "runs without SASL: start it without --sasl, or delete it and start a new one with --fresh --sasl"
    )
