"""The demo deployment on Docker, as a user runs it: `docker compose up --build` of
docker-compose.yml (and of its SASL option), with only the broker's image replaced by its
stand-in. Records go in from the host through the HOST listener, as any Kafka producer writes
them; one node's process is killed with kill -9 midway and Docker's restart policy brings it
back; the stream is ended, and each output's stable tuples must equal the reference evaluation
of what was written, tuple for tuple, with dense ids, and so must what a plain read_committed
consumer reads of hot_stats' egress topic. Then every service stops cleanly on SIGTERM and
`docker compose down` leaves nothing of the project behind."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaException, Message, Producer, TopicPartition

from infra.docker.standins import StandIns
from services.client.workload import readings
from services.coordinator.client import fetch_status, status_url
from services.core.admin import admin_client
from services.core.kafka import READ_COMMITTED, plain_consumer
from services.core.login import PASSWORD_ENV, USERNAME_ENV, Login
from services.core.paths import REPO_ROOT
from services.deploy import access
from services.egress.records import record_id
from services.operators.reference import evaluate
from services.spec import load_spec
from tests.compose import SASL
from tests.docker.project import Project
from tests.integration.helpers import hastream, read_until_end, user_env, wait_for

pytestmark = pytest.mark.docker

DEMO = REPO_ROOT / "examples" / "demo.yaml"
HOST = "localhost:29092"  # the broker's HOST listener, published by compose
OUTPUTS = {"hot_stats": "window_stat", "alerts": "reading"}
NODES = ("ingress_readings", "ingest", "alerts", "stats")
REPLICAS = 10  # replica partitions of the demo: 4 nodes and hot_stats' egress, x 2 partitions
EGRESS = "demo.hot_stats.stable"  # hot_stats' stable results, for any read_committed consumer
STATUS = status_url(6066)  # the coordinator's status page, published on the host's loopback
WRITTEN = 1200


@pytest.fixture
def plain(standins: StandIns) -> Iterator[Project]:
    project = Project(standins)
    yield from _brought_up(project)


@pytest.fixture
def sasl(standins: StandIns, tmp_path: Path) -> Iterator[Project]:
    env_file = tmp_path / ".env"
    r = hastream("logins", str(DEMO), "--env-file", str(env_file), env=user_env(tmp_path / "home"))
    assert r.returncode == 0, r.stderr
    yield from _brought_up(Project(standins, (SASL,), env_file))


def _brought_up(project: Project) -> Iterator[Project]:
    project("down", "-v", "--remove-orphans")  # what an interrupted run may have left
    try:
        project("up", "-d", "--build")
        yield project
    finally:
        project("down", "-v", "--remove-orphans", check=False)


def test_the_demo_on_compose_computes_the_reference_through_a_crash(plain: Project, tmp_path: Path) -> None:
    got, written = _run_the_demo(plain, tmp_path, crash="stats-r0-p0", producer={}, cli={}, reader=None)
    _assert_reference(got, written)
    _assert_clean_shutdown(plain)


def test_the_demo_with_logins_and_acls_on_compose(sasl: Project, tmp_path: Path) -> None:
    assert sasl.env_file is not None
    dotenv = access.read_env_file(sasl.env_file)
    admin = Login(access.ADMIN, dotenv[access.password_var(access.ADMIN)])
    key = access.source_key(load_spec(DEMO), "readings")  # an ingress stream: its raw topic's writer
    source = Login(access.usernames(load_spec(DEMO))[key], dotenv[access.password_var(key)])
    with access.acting_as(Login("", "")), pytest.raises(KafkaException):  # an empty user name: no SASL at all
        admin_client(HOST).list_topics(timeout=5)
    producer = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": source.username,
        "sasl.password": source.password,
    }
    cli = {USERNAME_ENV: source.username, PASSWORD_ENV: source.password}
    got, written = _run_the_demo(sasl, tmp_path, crash="ingest-r0-p1", producer=producer, cli=cli, reader=admin)
    _assert_reference(got, written)
    # Every service did its work with its own login and ACLs: the broker denied none of them anything.
    denied = [ln for ln in sasl("logs", "kafka").stdout.splitlines() if "Denied" in ln and "User:demo." in ln]
    assert denied == [], denied[:5]
    _assert_clean_shutdown(sasl)


def _run_the_demo(
    project: Project,
    tmp: Path,
    crash: str,
    producer: dict[str, str],
    cli: dict[str, str],
    reader: Login | None,
) -> tuple[dict[str, list[dict[int, dict]]], list[list[dict]]]:
    """Once every node replica is up, write records; kill -9 ``crash`` while they flow; end the
    stream and read each output to its end."""
    _wait_ready()
    written: list[list[dict]] = [[], []]
    writer = threading.Thread(target=_produce, args=(producer, WRITTEN, written))
    writer.start()
    try:
        _wait_for_output(reader, "demo.hot_stats.r0")
        project.crash(crash)
        project.wait_restarted(crash, 1)
    finally:
        writer.join(120)
    assert sum(map(len, written)) == WRITTEN, "the producer's records were not all acknowledged"
    ended = hastream("source", "end", str(DEMO), "readings", "--bootstrap", HOST, env={**user_env(tmp / "h"), **cli})
    assert ended.returncode == 0, ended.stderr
    with access.acting_as(reader):
        got = {s: read_until_end(HOST, f"demo.{s}.r0", 2, schema, timeout=120) for s, schema in OUTPUTS.items()}
        got["egress"] = _read_egress(sum(map(len, got["hot_stats"])))
    return got, written


def _read_egress(expect: int, timeout: float = 60) -> list[dict[int, dict]]:
    """What a plain read_committed consumer reads of the egress topic, per partition, by its id header,
    until ``expect`` records and two quiet seconds more."""
    c = plain_consumer(HOST, "egress-check", unique=True, **READ_COMMITTED)
    c.assign([TopicPartition(EGRESS, p, OFFSET_BEGINNING) for p in range(2)])
    got: list[dict[int, dict]] = [{}, {}]
    seen, quiet = 0, time.monotonic() + timeout

    def done() -> bool:
        nonlocal seen, quiet
        for m in c.consume(500, 0.2):
            if m.error() is None:
                got[m.partition() or 0][record_id(m.headers()) or 0] = json.loads(m.value() or b"")
                seen, quiet = seen + 1, time.monotonic() + 2
        return seen >= expect and time.monotonic() > quiet

    try:
        wait_for(done, timeout + 5, f"{expect} records on {EGRESS}", interval=0)
    finally:
        c.close()
    assert seen == expect, f"{EGRESS}: {seen} records read, {expect} stable results (a duplicate?)"
    return got


def _wait_ready(timeout: float = 120) -> None:
    """Until the coordinator's status page has every node and egress replica stable, as a user would check."""

    def all_stable() -> bool:
        states = [r["state"] for r in fetch_status(STATUS)["replicas"]]
        return len(states) == REPLICAS and set(states) == {"STABLE"}

    wait_for(all_stable, timeout, f"all {REPLICAS} replicas STABLE at {STATUS}", interval=0.5, tolerate=(OSError,))


def _produce(conf: dict[str, str], n: int, written: list[list[dict]]) -> None:
    """What a user's own producer does: JSON values keyed by sensor, the default partitioner, no
    headers, the record's timestamp its ``ts`` (the ingress takes the record timestamp), in order;
    about 200 records a second."""
    # Idempotent, as a producer that must not reorder is: a retry after a leader's hiccup (the broker
    # stalls on this loaded machine: "new leader-1 not found in cache") would otherwise put an older
    # record behind newer ones, more than the ingress's lateness behind, and it would be dead-lettered.
    p = Producer({"bootstrap.servers": HOST, "linger.ms": 5, "enable.idempotence": True, **conf})
    # Connected (and logged in) before the first record is stamped: a record that waits in the
    # producer's queue past the ingress's lateness (1 s) reaches it late, and is dead-lettered.
    p.list_topics("demo.readings.raw", timeout=30)

    def delivered(err: object, msg: Message) -> None:
        if err is None:
            written[msg.partition() or 0].append(json.loads(msg.value() or b""))

    for rec in readings(n, sensors=6, seed=5, wall_clock=True):
        p.produce(
            "demo.readings.raw",
            json.dumps(rec).encode(),
            rec["sensor"].encode(),
            timestamp=rec["ts"],
            on_delivery=delivered,
        )
        p.poll(0)
        time.sleep(0.005)
    p.flush(60)


def _wait_for_output(reader: Login | None, topic: str, timeout: float = 60) -> None:
    """Until the first results are in ``topic``: the node to crash has state by then."""
    with access.acting_as(reader):
        c = plain_consumer(HOST, "check", unique=True)
    try:
        wait_for(
            lambda: any(c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] > 0 for p in range(2)),
            timeout,
            f"results in {topic}",
            interval=0.5,
        )
    finally:
        c.close()


def _assert_reference(got: dict[str, list[dict[int, dict]]], written: list[list[dict]]) -> None:
    want = evaluate(load_spec(DEMO), {"readings.raw": written}, ended=True)
    assert sum(map(len, want["hot_stats"])) > 0
    for stream in (*OUTPUTS, "egress"):
        for p in range(2):
            parts = got[stream][p]
            assert sorted(parts) == list(range(len(parts))), f"{stream} p{p}: ids not dense"
            wanted = want["hot_stats" if stream == "egress" else stream][p]
            assert [parts[i] for i in sorted(parts)] == wanted, f"{stream} p{p} differs from the reference"


def _assert_clean_shutdown(project: Project) -> None:
    """SIGTERM: every hastream service flushes, commits and exits 0 (the broker's JVM exits 143, as
    on any SIGTERM); then nothing of the project remains."""
    project("stop")
    codes = project.exit_codes()
    assert codes.pop("kafka") in (0, 143)
    assert len(codes) == REPLICAS + 2 and [s for s, code in codes.items() if code != 0] == [], codes
    for service in (s for s in codes if s.startswith(NODES)):
        assert "stopped: consumed" in project("logs", service).stdout, service
    for service in (s for s in codes if s.startswith("egress_")):
        assert "stable tuples written" in project("logs", service).stdout, service
    project("down", "-v")
    assert project.remains() == []
