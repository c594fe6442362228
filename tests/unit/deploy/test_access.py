"""Who may do what on a SASL broker, worked out from the spec: each service its own user, and
ACLs for what it reads and writes and nothing else (no broker here: ``tests/integration/test_access.py``
checks the broker enforces them)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from services.core.client_log import _connection_line, _login_failure
from services.core.kafka import group_id, observed
from services.core.login import PASSWORD_ENV, USERNAME_ENV, Login, env_login, java_client_conf, security_conf
from services.deploy import access
from services.deploy.access import (
    CLUSTER,
    CREATE,
    DESCRIBE,
    GROUP,
    IDEMPOTENT_WRITE,
    READ,
    TOPIC,
    WRITE,
    Acl,
    coordinator_acls,
    node_acls,
    source_acls,
    spec_acls,
    usernames,
)
from services.deploy.deployment import Process
from services.deploy.local import process_env, service_commands
from services.spec import parse_spec
from services.spec.plan import plan_node
from services.spec.topics import all_topics

SPEC_TEXT = """\
name: acl
defaults: {partitions: 2}
streams:
  src: {schema: reading, key: sensor}
  raw: {schema: reading, key: sensor, ingress: {time: ts}}
  warm: {schema: reading, key: sensor}
  both: {schema: reading, key: sensor}
  out: {schema: reading, key: sensor}
operators:
  warm: {type: filter, input: src, output: warm, where: "value >= 25"}
  join: {type: union, inputs: [warm, raw], output: both}
  keep: {type: filter, input: both, output: out, where: "value < 90"}
nodes:
  n1: {operators: [warm], replicas: 2}
  n2: {operators: [join, keep]}
"""
SPEC = parse_spec(SPEC_TEXT)


def topics(acls: list[Acl], *ops: str) -> set[str]:
    """The topics ``acls`` allow every one of ``ops`` on."""
    by_topic: dict[str, set[str]] = {}
    for a in acls:
        if a.resource == TOPIC:
            by_topic.setdefault(a.name, set()).add(a.operation)
    return {t for t, have in by_topic.items() if set(ops) <= have}


def test_each_service_has_its_own_user() -> None:
    users = usernames(SPEC)
    assert users["n1.r0"] != users["n1.r1"] != users["n2.r0"]
    assert len(set(users.values())) == len(users)
    assert set(users) == {"coordinator", "n1.r0", "n1.r1", "n2.r0", "ingress_raw.r0", "source:src", "source:raw.raw"}
    assert all(u.startswith("acl.") for u in users.values())


def test_a_node_replica_writes_only_its_own_topics_and_reads_only_its_inputs() -> None:
    n2 = node_acls(SPEC, "n2", 0)
    n1_outputs = set(plan_node(SPEC, "n1").outputs[0].topics)
    assert n1_outputs == {"acl.warm.r0", "acl.warm.r1"}
    assert n1_outputs | {"acl.raw.r0"} <= topics(n2, READ), "every replica of every input"
    assert not n1_outputs & topics(n2, WRITE), "never another node's output"
    assert topics(n2, WRITE) == {"acl.out.r0", "acl.restart.n2.r0", "acl.heartbeats", "acl.control", "acl.deadletter"}
    assert "acl.src" not in topics(n2), "a stream it does not read"
    assert topics(n2, READ) - n1_outputs - {"acl.raw.r0"} == {
        "acl.out.r0",
        "acl.restart.n2.r0",
        "acl.heartbeats",
        "acl.control",
    }


def test_an_ingress_writes_its_ticks_into_its_raw_topic_and_no_other_input() -> None:
    """The ingress moves an idle raw topic's time on by writing a tick (a BOUNDARY) into it
    (services.node.ingress): its replicas must write the raw topic, which they also read."""
    ingress = node_acls(SPEC, "ingress_raw", 0)
    assert "acl.raw.raw" in topics(ingress, READ, WRITE)
    assert topics(ingress, WRITE) == {
        "acl.raw.raw",
        "acl.raw.r0",
        "acl.restart.ingress_raw.r0",
        "acl.heartbeats",
        "acl.control",
        "acl.deadletter",
    }
    assert "acl.raw.raw" not in topics(node_acls(SPEC, "n2", 0), WRITE), "only the ingress ticks"


def test_replicas_of_one_node_cannot_write_each_others_logs() -> None:
    r0, r1 = topics(node_acls(SPEC, "n1", 0), WRITE), topics(node_acls(SPEC, "n1", 1), WRITE)
    assert "acl.warm.r0" in r0 and "acl.warm.r1" not in r0
    assert "acl.warm.r1" in r1 and "acl.warm.r0" not in r1
    assert "acl.restart.n1.r0" in r0 and "acl.restart.n1.r1" not in r0


def test_a_node_commits_only_in_its_own_groups_and_only_describes_the_readers_groups() -> None:
    n1 = node_acls(SPEC, "n1", 1)
    groups = {(a.name, a.operation, a.prefixed) for a in n1 if a.resource == GROUP}
    own = {group_id(plan_node(SPEC, "n1").service_name(1, p)) for p in (0, 1)}
    assert own == {"hastream.acl.n1.r1.p0", "hastream.acl.n1.r1.p1"}
    assert {(g, READ, False) for g in own} | {("hastream.", DESCRIBE, True)} == groups
    assert [a for a in n1 if a.resource == CLUSTER] == [Acl(n1[0].user, CLUSTER, "kafka-cluster", IDEMPOTENT_WRITE)]


def test_the_coordinator_keeps_its_faust_topics_and_the_control_plane() -> None:
    acls = coordinator_acls(SPEC)
    assert topics(acls, READ, WRITE) == {"acl.heartbeats", "acl.control", *access.internal_topics(SPEC)}
    assert topics(acls, CREATE) == set(access.internal_topics(SPEC))
    assert ("hastream-acl-coordinator", READ) in {(a.name, a.operation) for a in acls if a.resource == GROUP}


def test_the_coordinators_topics_are_the_ones_faust_names(tmp_path: Path) -> None:
    from services.coordinator.app import Coordinator

    coord = Coordinator(SPEC, "127.0.0.1:1", data_dir=tmp_path, replication=1)
    faust_names = [t.changelog_topic.get_topic_name() for t in (coord.replicas, coord.recon)]
    faust_names.append(coord.app._leader_assignor._leader_topic_name)  # type: ignore[attr-defined]
    assert sorted(faust_names) == sorted(access.internal_topics(SPEC))


def test_a_source_writes_its_own_stream_and_an_ingress_stream_through_its_raw_topic() -> None:
    assert topics(source_acls(SPEC, "src"), READ, WRITE) == {"acl.src"}
    assert access.source_key(SPEC, "raw") == "source:raw.raw"
    assert topics(source_acls(SPEC, "raw.raw"), READ, WRITE) == {"acl.raw.raw"}


def test_every_acl_names_a_topic_of_the_deployment_and_every_topic_has_a_writer() -> None:
    acls = spec_acls(SPEC)
    deployed = {t for t, _ in all_topics(SPEC)} | set(access.internal_topics(SPEC))
    assert topics(acls) <= deployed
    assert deployed <= topics(acls, WRITE)


def test_two_deployments_with_the_same_stream_names_get_disjoint_acls() -> None:
    """Topics are namespaced per deployment, and the ACLs follow: a node of one deployment may not
    touch the same-named topics of another; only a shared ``topic:`` is the same in both."""
    other = parse_spec(SPEC_TEXT.replace("name: acl", "name: other"))
    assert not {t for t, _ in all_topics(SPEC)} & {t for t, _ in all_topics(other)}
    mine, theirs = spec_acls(SPEC), spec_acls(other)
    assert not topics(mine) & topics(theirs)
    shared = parse_spec(
        SPEC_TEXT.replace(
            "src: {schema: reading, key: sensor}", "src: {schema: reading, key: sensor, topic: plant.src}"
        )
    )
    assert topics(node_acls(shared, "n1", 0), READ) >= {"plant.src"}
    assert topics(source_acls(shared, "src"), READ, WRITE) == {"plant.src"}


def test_every_process_of_the_launcher_has_a_login(tmp_path: Path) -> None:
    roles = [role for role, _ in service_commands(SPEC, tmp_path / "spec.yaml")]
    assert {access.login_key(SPEC, r) for r in roles} == {"coordinator", "n1.r0", "n1.r1", "n2.r0", "ingress_raw.r0"}
    assert access.login_key(SPEC, "n1.r1.p1") == "n1.r1"
    with pytest.raises(LookupError):
        access.login_key(SPEC, "n9.r0.p0")


def test_a_process_gets_only_its_own_login() -> None:
    logins = access.new_logins(SPEC, Login("admin", "secret"))
    inherited = {"PATH": "/bin", USERNAME_ENV: "admin", PASSWORD_ENV: "secret"}
    env = process_env(inherited, Process("n1.r1.p0", 0, "log", [], login="n1.r1"), logins)
    assert env[USERNAME_ENV] == "acl.node.n1.r1" and env[PASSWORD_ENV] == logins["n1.r1"].password
    assert "secret" not in env.values() and env["PATH"] == "/bin"
    assert process_env(inherited, Process("x", 0, "log", [])) == inherited, "no SASL deployment: unchanged"


def test_logins_are_kept_for_the_owner_only(tmp_path: Path) -> None:
    logins = access.new_logins(SPEC, Login("admin", "secret"))
    access.save_logins(tmp_path, logins)
    mode = stat.S_IMODE(os.stat(tmp_path / access.CREDENTIALS_FILE).st_mode)
    assert mode == 0o600
    assert access.load_logins(tmp_path) == logins
    assert access.load_logins(tmp_path / "none") == {}
    assert len({v.password for v in logins.values()}) == len(logins)


def test_the_environment_login_becomes_client_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(USERNAME_ENV, raising=False)
    assert env_login() is None and security_conf(None) == {} and java_client_conf(None) == {}
    assert "security.protocol" not in observed({"bootstrap.servers": "x"}), "without a login nothing changes"
    monkeypatch.setenv(USERNAME_ENV, "u")
    monkeypatch.setenv(PASSWORD_ENV, 'p"w')
    login = env_login()
    assert login == Login("u", 'p"w', "SASL_PLAINTEXT")
    conf = observed({"bootstrap.servers": "x"})
    assert {k: conf[k] for k in ("security.protocol", "sasl.mechanisms", "sasl.username", "sasl.password")} == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "u",
        "sasl.password": 'p"w',
    }
    jaas = java_client_conf(login)["sasl.jaas.config"]
    assert jaas.endswith('username="u" password="p\\"w";')


def test_a_refused_login_is_told_from_a_lost_connection() -> None:
    refused = (
        "sasl_plaintext://127.0.0.1:5000/bootstrap: SASL authentication error: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 312ms in state AUTH_REQ)"
    )
    assert _login_failure(refused) == (
        "127.0.0.1:5000",
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
    )
    no_sasl = (
        "sasl_plaintext://127.0.0.1:5000/bootstrap: SASL SCRAM-SHA-512 mechanism handshake failed: Broker: Request "
        "not valid in current SASL state: broker's supported mechanisms:  (after 0ms in state AUTH_HANDSHAKE)"
    )
    assert _login_failure(no_sasl) == (
        "127.0.0.1:5000",
        "it takes no SASL logins on that port (a broker started without --sasl?)",
    )
    lost = "SASL authentication error: SaslAuthenticateRequest failed: Local: Broker transport failure (after 0ms in state DOWN)"
    assert _login_failure(lost) is None


def test_a_sasl_brokers_outage_is_still_one_waiting_line() -> None:
    """librdkafka names a SASL listener's broker with its protocol first; the outage line still finds it."""
    line = (
        "[thrd:sasl_plaintext://127.0.0.1:5000/bootstrap]: sasl_plaintext://127.0.0.1:5000/bootstrap: "
        "Connect to ipv4#127.0.0.1:5000 failed: Connection refused (after 0ms in state CONNECT)"
    )
    found = _connection_line(line)
    assert found is not None and found[0] == "127.0.0.1:5000"


def test_compose_logins_keep_the_passwords_already_written_and_stay_private(tmp_path: Path) -> None:
    """The admin's password is in the compose broker's storage once it is formatted: writing the
    logins again must not change it, nor lose the file's other lines."""
    env_file = tmp_path / ".env"
    env_file.write_text("# mine\nOTHER=1\n")
    first = access.compose_passwords(SPEC, access.read_env_file(env_file))
    access.write_env_file(env_file, first)
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    again = access.compose_passwords(SPEC, access.read_env_file(env_file))
    assert again == first
    access.write_env_file(env_file, again)
    assert access.read_env_file(env_file) == {"OTHER": "1", **first}
    assert env_file.read_text().startswith("# mine\n")
    logins = access.compose_logins(SPEC, {USERNAME_ENV: "admin", PASSWORD_ENV: "pw", **first})
    assert {k: v.username for k, v in logins.items() if k != access.ADMIN} == usernames(SPEC)
    assert logins[access.node_key("n1", 1)].password == first["HASTREAM_PASSWORD_N1_R1"]
    with pytest.raises(ValueError, match="HASTREAM_PASSWORD_N2_R0"):
        access.compose_logins(SPEC, {USERNAME_ENV: "admin", **{k: v for k, v in first.items() if "N2" not in k}})
