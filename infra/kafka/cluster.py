"""Real Apache Kafka brokers (KRaft, no ZooKeeper, no Docker) launched from the Maven Central jars.

Tests, benchmarks and the ``hastream kafka`` CLI need a genuine broker with genuine durability
semantics (acks, ISR, leader fail-over), not a mock. Docker is not always available, so the
official broker jars are fetched with Maven (``infra/kafka/pom.xml``) and each broker runs as a
plain ``java`` process in combined broker+controller mode.

Each broker JVM runs in its own session/process group so a fault test can ``kill -9`` exactly one
of them, and so an interrupted test run does not forward Ctrl-C to the brokers before fixture
teardown has stopped them cleanly. A ``cluster.json`` state file in the data dir lets another
process (the CLI) report on or stop a cluster it did not start.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from infra.maven import MavenError, fetch_jars, pom_properties
from services.core.client_log import port_open
from services.core.errors import HastreamError
from services.core.paths import hastream_home, jars_dir, write_private

__all__ = [
    "FAILOVER_BOUND_S",
    "FAILOVER_PROPS",
    "KAFKA_VERSION",
    "KafkaCluster",
    "KafkaClusterError",
    "ensure_kafka_jars",
]

POM_PATH = Path(__file__).resolve().with_name("pom.xml")
STATE_FILE = "cluster.json"
ADMIN_FILE = "admin.json"  # a SASL cluster's admin login (mode 0600), for the CLI and the launcher
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"

# Heap per broker JVM. The brokers are meant for a 2-core laptop/CI box running several JVMs
# (Kafka, Spark, tests) at once; override with HASTREAM_KAFKA_HEAP (e.g. "1g") for benchmarks.
DEFAULT_HEAP = "512m"

# How fast the cluster notices a dead broker and moves its partitions' leadership, so a broker
# failure fits inside DPC's delay bound X (docs/dpc.md, "The delay budget"). The controller
# fences a broker whose heartbeats stop for the session timeout, which drops it from every ISR
# and elects new leaders; when the dead broker was the active controller, the other voters
# first notice (fetch timeout) and elect a new one (election timeout, randomized up to twice
# it). A single broker keeps Kafka's own (heartbeats every 2 s, a 9 s session): it has no other
# to fail over to, and with a 1 s session a loaded machine's controller timed out its only
# broker's heartbeats ("controller event queue overloaded") and clients saw
# NOT_LEADER_FOR_PARTITION. docker-compose.yml runs a single broker, so it sets none of these.
FAILOVER_PROPS: dict[str, int] = {
    "broker.heartbeat.interval.ms": 100,
    "broker.session.timeout.ms": 1000,
    "controller.quorum.fetch.timeout.ms": 1000,
    "controller.quorum.election.timeout.ms": 300,
    "controller.quorum.election.backoff.max.ms": 300,
}
# The longest a partition stops taking and delivering writes when its leader is killed, with
# these settings and the clients of services.core.kafka: the F of docs/dpc.md's delay budget.
# At worst (the active controller killed) a voter notices after 1 s, is elected within 0.6 s,
# fences the dead broker a 1 s session later, and clients find the new leader within 0.5 s:
# 3.1 s, plus a margin for a loaded machine.
FAILOVER_BOUND_S = 4.0

# A SASL cluster (``sasl=True``): clients authenticate with SCRAM-SHA-512 on the one client
# listener (which brokers also use among themselves, as the admin), and the StandardAuthorizer
# refuses whatever no ACL allows. The controller listener cannot use SCRAM (its credentials live
# in the metadata log the controllers serve), so it takes SASL/PLAIN with the admin's password in
# the broker's own configuration: no listener of a SASL cluster accepts an unauthenticated client.
SASL_MECHANISM = "SCRAM-SHA-512"
SASL_LISTENER = "SASL_PLAINTEXT"
ADMIN_USER = "admin"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

_log = logging.getLogger(__name__)
# librdkafka reports every refused connection while a broker is still booting; those are
# expected during the readiness wait, so they go to a silent logger instead of stderr.
_quiet_rdkafka = logging.getLogger(f"{__name__}.rdkafka")
_quiet_rdkafka.addHandler(logging.NullHandler())
_quiet_rdkafka.propagate = False


class KafkaClusterError(HastreamError, RuntimeError):
    """Anything that stops a broker from being fetched, started, reached or stopped."""


KAFKA_VERSION: str = pom_properties(POM_PATH).get("kafka.version", "unknown")


def ensure_kafka_jars() -> Path:
    """Return the folder with the Kafka broker jars, fetching them with Maven on first use."""
    target = jars_dir("kafka")
    try:
        fetch_jars(POM_PATH, target, f"Kafka {KAFKA_VERSION} jars", ("kafka_2",))
    except MavenError as e:
        raise KafkaClusterError(str(e)) from None
    return target


def set_client_quota(bootstrap: str, client_id: str, producer_bytes_per_s: int) -> None:
    """Cap what the clients named ``client_id`` may write per second (a Kafka client quota; the broker
    delays their requests past it), with Kafka's own config tool."""
    cmd = [
        java_binary(),
        "-cp",
        f"{ensure_kafka_jars()}/*",
        "kafka.admin.ConfigCommand",
        "--bootstrap-server",
        bootstrap,
    ]
    cmd += ["--alter", "--add-config", f"producer_byte_rate={producer_bytes_per_s}"]
    cmd += ["--entity-type", "clients", "--entity-name", client_id]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise KafkaClusterError(f"client quota for {client_id} not set: {java_error_line(done.stdout + done.stderr)}")


def java_error_line(output: str) -> str:
    """The line of a JVM's output that names the failure (the exception message, not a stack frame)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and not ln.startswith(("\tat ", "\t... "))]
    for line in lines:
        line = re.sub(r'^Exception in thread "[^"]*"\s*', "", line)
        match = re.search(r"\b[\w.$]*(?:Exception|Error)\b:?\s*(.*)$", line)
        if match and not line.startswith("Caused by"):
            return line[match.start() :]
    return lines[-1] if lines else "no output"


def java_binary() -> str:
    """The ``java`` executable, preferring ``JAVA_HOME`` like Kafka's own scripts do."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise KafkaClusterError("'java' is not on PATH (Java 17+ is needed to run the Kafka broker)")
    return java


def _free_ports(host: str, count: int) -> list[int]:
    """Ask the kernel for ``count`` distinct free ports (all sockets held open until all are picked)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _new_cluster_id() -> str:
    """KRaft cluster ids are a UUID in unpadded URL-safe base64 (what ``kafka-storage random-uuid`` prints)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _pid_is_broker(pid: int, props: Path) -> bool:
    """True if ``pid`` is alive and is *our* broker JVM (guards against pid reuse after a reboot)."""
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
        return False
    return MAIN_CLASS.encode() in cmdline and str(props).encode() in cmdline


_LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Broker logging for hastream: warnings and the lifecycle lines, to stdout (redirected to broker.log). -->
<Configuration status="WARN" shutdownHook="disable">
  <Appenders>
    <Console name="STDOUT" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="STDOUT"/></Root>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/>
    <Logger name="kafka.server.BrokerServer" level="INFO"/>
    <Logger name="kafka.server.ControllerServer" level="INFO"/>
    <Logger name="kafka.Kafka" level="INFO"/>
    <Logger name="org.apache.kafka.clients" level="ERROR"/>
    <Logger name="state.change.logger" level="WARN"/>
    <!-- A SASL cluster's refusals: which user was denied what (nothing without an authorizer). -->
    <Logger name="kafka.authorizer.logger" level="INFO"/>
  </Loggers>
</Configuration>
"""


@dataclass
class _Node:
    """Fixed identity of one broker: survives restarts so clients and the quorum can find it again."""

    node_id: int
    port: int
    controller_port: int
    dir: Path

    @property
    def props(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.dir / "broker.log"


# Clusters started in this process and not detached: stopped at interpreter exit so a crashed
# or interrupted test run does not leave JVMs behind (they are in their own session). Strong
# references on purpose: dropping the last handle must not make the brokers unstoppable.
_owned: set[KafkaCluster] = set()


@atexit.register
def _stop_owned() -> None:
    for cluster in list(_owned):
        with contextlib.suppress(Exception):
            cluster.stop(timeout=10)


class KafkaCluster:
    """A local KRaft Kafka cluster of ``brokers`` combined broker+controller JVMs.

    >>> with KafkaCluster(brokers=1, data_dir=tmp).start() as kafka:
    ...     produce(kafka.bootstrap)
    """

    def __init__(
        self,
        brokers: int = 1,
        data_dir: Path | None = None,
        host: str = "127.0.0.1",
        *,
        sasl: bool = False,
        failover: dict[str, int] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.brokers = brokers
        self.sasl = sasl
        # ``FAILOVER_PROPS`` with these changed; a single broker, only these
        self.failover = {**(FAILOVER_PROPS if brokers > 1 else {}), **(failover or {})}
        self.data_dir = (Path(data_dir) if data_dir is not None else hastream_home() / "kafka").expanduser().absolute()
        self.host = host
        self.cluster_id: str | None = None
        self._nodes: list[_Node] = []
        self._pids: list[int | None] = [None] * brokers
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * brokers

    # ------------------------------------------------------------------ properties

    @property
    def bootstrap(self) -> str:
        """``host:port`` list of every broker, for ``bootstrap.servers``."""
        if not self._nodes:
            raise KafkaClusterError("the cluster has not been started")
        return ",".join(f"{self.host}:{n.port}" for n in self._nodes)

    @property
    def pids(self) -> list[int | None]:
        """Broker JVM pid per broker index (``None`` if that broker was never started)."""
        return list(self._pids)

    @property
    def state_file(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def admin_file(self) -> Path:
        return self.data_dir / ADMIN_FILE

    def admin_login(self) -> tuple[str, str]:
        """(user, password) of a SASL cluster's super user, made when its storage was formatted."""
        if not self.sasl:
            raise KafkaClusterError(f"the Kafka cluster in {self.data_dir} runs without SASL: it has no admin login")
        try:
            stored = json.loads(self.admin_file.read_text())
            return str(stored["username"]), str(stored["password"])
        except (OSError, ValueError, KeyError) as exc:
            raise KafkaClusterError(f"no admin login of the SASL cluster in {self.data_dir}: {exc}") from None

    def client_conf(self) -> dict[str, str]:
        """librdkafka settings a client needs besides ``bootstrap.servers`` (the admin's login on a SASL cluster)."""
        if not self.sasl:
            return {}
        user, password = self.admin_login()
        return {
            "security.protocol": SASL_LISTENER,
            "sasl.mechanisms": SASL_MECHANISM,
            "sasl.username": user,
            "sasl.password": password,
        }

    def log_file(self, i: int) -> Path:
        """The broker's combined stdout/stderr/log4j output, the first place to look when it fails."""
        return self._node(i).log_file

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 120, *, detach: bool = False, fresh: bool = False) -> KafkaCluster:
        """Launch every broker that is not running and wait until clients see all of them.

        A cluster already in the data dir (``cluster.json`` and formatted storage) is resumed: same
        cluster id, ports and data, so clients and services find it where they left it. Otherwise,
        or with ``fresh=True``, the data dir's old cluster is deleted and a new one is formatted on
        new ports. ``detach=True`` leaves the JVMs running after this Python process exits (the CLI
        uses it); otherwise they are stopped at interpreter exit if :meth:`stop` was not called.
        """
        if fresh and self.state_file.exists() and KafkaCluster.load(self.data_dir).is_running():
            raise KafkaClusterError(f"the Kafka cluster in {self.data_dir} is running: stop it before --fresh")
        if not fresh and self._adopt_stored() and all(self.alive()):
            raise KafkaClusterError(f"a Kafka cluster is already running in {self.data_dir} ({self.bootstrap})")
        jars = ensure_kafka_jars()
        java = java_binary()
        if fresh or not self._adopt_stored():
            self._create(java, jars)
        else:
            self._check_ports_free()
        if not detach:
            _owned.add(self)
        try:
            for i in range(self.brokers):
                if not self._alive(i):
                    self._launch(i, java, jars)
            self._write_state()
            self._wait_ready(timeout, expect=self.brokers)
        except BaseException:
            self.stop(timeout=10)
            raise
        return self

    def stored(self) -> bool:
        """Whether the data dir holds a cluster this handle can resume (its state and formatted storage)."""
        return self._adopt_stored()

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM every broker (controlled shutdown), wait, then SIGKILL whatever is left.

        All brokers are signalled together: stopping them one by one would make each shutdown wait
        for leadership moves and, in the last ones, for a controller quorum that is already gone.
        """
        _owned.discard(self)
        live = [i for i in range(self.brokers) if self._alive(i)]
        for i in live:
            self._signal(i, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for i in live:
            if not self._wait_gone(i, deadline):
                self._signal(i, signal.SIGKILL)
                self._wait_gone(i, time.monotonic() + 10)
        for i in range(self.brokers):
            self._reap(i)
        if self._nodes:
            self._write_state()

    def kill_broker(self, i: int) -> None:
        """SIGKILL broker ``i`` with no shutdown at all: the crash that fault tests need."""
        self._node(i)
        if not self._alive(i):
            raise KafkaClusterError(f"broker {i} is not running")
        self._signal(i, signal.SIGKILL)
        self._wait_gone(i, time.monotonic() + 10)
        self._reap(i)
        self._write_state()

    def start_broker(self, i: int, timeout: float = 120) -> None:
        """Restart broker ``i`` on its old ports and data dir and wait until clients see it again."""
        node = self._node(i)
        if self._alive(i):
            raise KafkaClusterError(f"broker {i} is already running (pid {self._pids[i]})")
        self._launch(i, java_binary(), ensure_kafka_jars())
        self._write_state()
        self._wait_ready(timeout, expect=sum(self._alive(j) for j in range(self.brokers)), must_see=node.node_id)

    def wait_in_sync(self, timeout: float = 120, topics: list[str] | None = None) -> None:
        """Block until every partition of ``topics`` (default: all) has each of its replicas in its ISR,
        as after a restarted broker caught up: killing another broker before then can leave a
        partition below its min ISR."""
        from confluent_kafka.admin import AdminClient

        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": _quiet_rdkafka, **self.client_conf()}
        admin = AdminClient(conf)
        deadline = time.monotonic() + timeout
        behind: list[str] = []
        while time.monotonic() < deadline:
            meta = admin.list_topics(timeout=10)
            behind = [
                f"{t}[{p.id}]"
                for t, tm in meta.topics.items()
                if topics is None or t in topics
                for p in tm.partitions.values()
                if len(p.isrs) < len(p.replicas)
            ]
            if not behind:
                return
            time.sleep(0.5)
        raise KafkaClusterError(f"partitions not fully in sync after {timeout:.0f}s: {', '.join(behind[:5])}")

    def is_running(self) -> bool:
        """True while at least one broker JVM of this cluster is alive (a killed broker leaves it degraded, not down)."""
        return any(self._alive(i) for i in range(self.brokers))

    def alive(self) -> list[bool]:
        """Liveness of each broker JVM, by index."""
        return [self._alive(i) for i in range(self.brokers)]

    @classmethod
    def load(cls, data_dir: Path | None = None) -> KafkaCluster:
        """Rebuild a handle on a cluster from its ``cluster.json``, e.g. one started detached by the CLI."""
        data_dir = Path(data_dir) if data_dir is not None else hastream_home() / "kafka"
        path = data_dir / STATE_FILE
        try:
            state: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            raise KafkaClusterError(f"no Kafka cluster state in {data_dir} (missing {STATE_FILE})") from None
        except (OSError, ValueError) as exc:
            raise KafkaClusterError(f"unreadable Kafka cluster state {path}: {exc}") from None
        cluster = cls(
            brokers=int(state["brokers"]), data_dir=data_dir, host=state["host"], sasl=bool(state.get("sasl", False))
        )
        cluster.cluster_id = state.get("cluster_id")
        cluster._nodes = [_Node(n["node_id"], n["port"], n["controller_port"], Path(n["dir"])) for n in state["nodes"]]
        cluster._pids = list(state["pids"])
        return cluster

    def __enter__(self) -> KafkaCluster:
        if not self.is_running():
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.bootstrap if self._nodes else "not started"
        return f"KafkaCluster(brokers={self.brokers}, {where}, data_dir={str(self.data_dir)!r})"

    # ------------------------------------------------------------------ internals

    def _node(self, i: int) -> _Node:
        if not self._nodes:
            raise KafkaClusterError("the cluster has not been started")
        if not 0 <= i < self.brokers:
            raise KafkaClusterError(f"no broker {i}: the cluster has brokers 0..{self.brokers - 1}")
        return self._nodes[i]

    def _adopt_stored(self) -> bool:
        """Take the nodes of the cluster recorded in the data dir, if any; whether its storage is formatted."""
        if not self._nodes and self.state_file.exists():
            stored = KafkaCluster.load(self.data_dir)
            if stored.brokers != self.brokers:
                raise KafkaClusterError(
                    f"the Kafka cluster in {self.data_dir} has {stored.brokers} broker(s), not {self.brokers}: "
                    "start it as it is, or start a new one with --fresh"
                )
            if stored.sasl != self.sasl:
                raise KafkaClusterError(
                    f"the Kafka cluster in {self.data_dir} runs {'with' if stored.sasl else 'without'} SASL: "
                    f"start it as it is{' (--sasl)' if stored.sasl else ' (without --sasl)'}, "
                    f"or start a new one with --fresh{' --sasl' if self.sasl else ''}"
                )
            self.host, self.cluster_id, self._nodes, self._pids = (
                stored.host,
                stored.cluster_id,
                stored._nodes,
                stored._pids,
            )
        return bool(self._nodes) and all((n.dir / "logs" / "meta.properties").exists() for n in self._nodes)

    def _create(self, java: str, jars: Path) -> None:
        """A new cluster: the old one's broker dirs deleted, new ports and cluster id, storage formatted."""
        self._prepare_fresh_dirs()
        ports = _free_ports(self.host, 2 * self.brokers)
        self.cluster_id = _new_cluster_id()
        self._pids, self._procs = [None] * self.brokers, [None] * self.brokers
        self._nodes = [
            _Node(i, ports[2 * i], ports[2 * i + 1], self.data_dir / f"broker-{i}") for i in range(self.brokers)
        ]
        (self.data_dir / "log4j2.xml").write_text(_LOG4J2_XML)
        if self.sasl:
            write_private(self.admin_file, json.dumps({"username": ADMIN_USER, "password": secrets.token_urlsafe(24)}))
        for node in self._nodes:
            node.dir.mkdir(parents=True, exist_ok=True)
            write_private(node.props, self._server_properties(node))
        self._format_storage(java, jars)

    def _check_ports_free(self) -> None:
        """A resumed broker needs its old ports: say which one another process holds."""
        (self.data_dir / "log4j2.xml").write_text(_LOG4J2_XML)
        for i, node in enumerate(self._nodes):
            if self._alive(i):
                continue
            for port in (node.port, node.controller_port):
                if port_open(f"{self.host}:{port}"):
                    raise KafkaClusterError(
                        f"port {port} of broker {i} in {self.data_dir} is taken by another process: "
                        "free it, or start a new cluster on new ports with --fresh"
                    )

    def _prepare_fresh_dirs(self) -> None:
        """Remove the previous cluster's broker dirs (ours only) so format starts from nothing."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for old in self.data_dir.glob("broker-*"):
            if old.is_dir() and (old / "server.properties").exists():
                shutil.rmtree(old)
        self.state_file.unlink(missing_ok=True)
        self.admin_file.unlink(missing_ok=True)

    def _server_properties(self, node: _Node) -> str:
        n = self.brokers
        rf = min(n, 3)
        min_isr = 1 if n == 1 else 2
        voters = ",".join(f"{m.node_id}@{self.host}:{m.controller_port}" for m in self._nodes)
        props: dict[str, object] = {
            # KRaft combined mode: every node is a broker and a voter of the controller quorum.
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://{self.host}:{node.port},CONTROLLER://{self.host}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{node.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": node.dir / "logs",
            # Replication: single-node clusters must not wait for replicas that cannot exist.
            "default.replication.factor": rf,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.num.partitions": 10,
            # Test friendliness: explicit topics, no join delay, fast failure detection.
            "auto.create.topics.enable": "false",
            "num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
            **self.failover,
            "replica.lag.time.max.ms": 10000,
            "controlled.shutdown.enable": "true",
            **(self._sasl_properties(node) if self.sasl else {}),
            # Small footprint: several JVMs share a 2-core box.
            "num.network.threads": 2,
            "num.io.threads": 4,
            "num.recovery.threads.per.data.dir": 1,
            "background.threads": 4,
            "log.segment.bytes": 16 * 1024 * 1024,
            "log.retention.hours": 24,
            "log.retention.check.interval.ms": 60000,
            "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
            "log.cleaner.threads": 1,
            "socket.send.buffer.bytes": 1024 * 1024,
            "socket.receive.buffer.bytes": 1024 * 1024,
        }
        header = f"# Written by hastream for Kafka {KAFKA_VERSION}; node {node.node_id} of {n}.\n"
        return header + "".join(f"{k}={v}\n" for k, v in props.items())

    def _sasl_properties(self, node: _Node) -> dict[str, object]:
        """SCRAM on the client listener (brokers log in to each other as the admin), PLAIN on the
        controller listener (SCRAM cannot be used there), ACLs enforced, the admin a super user."""
        user, password = self.admin_login()
        client = f"{SASL_LISTENER}://{self.host}:{node.port}"
        scram = (
            f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'
        )
        plain = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{password}" user_{user}="{password}";'
        )
        return {
            "listeners": f"{client},CONTROLLER://{self.host}:{node.controller_port}",
            "advertised.listeners": client,
            "inter.broker.listener.name": SASL_LISTENER,
            "listener.security.protocol.map": f"{SASL_LISTENER}:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": SASL_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SASL_MECHANISM,
            f"listener.name.{SASL_LISTENER.lower()}.sasl.enabled.mechanisms": SASL_MECHANISM,
            f"listener.name.{SASL_LISTENER.lower()}.{SASL_MECHANISM.lower()}.sasl.jaas.config": scram,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{user}",
        }

    def _jvm_command(self, java: str, jars: Path, main: str) -> list[str]:
        heap = os.environ.get("HASTREAM_KAFKA_HEAP", DEFAULT_HEAP)
        return [
            java,
            f"-Xmx{heap}",
            "-Xms64m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:-UsePerfData",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.xml'}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            f"{jars}/*",
            main,
        ]

    def _format_storage(self, java: str, jars: Path) -> None:
        """Run ``kafka-storage format`` for every node in parallel (each is a JVM start, ~1-2 s)."""
        procs = []
        for node in self._nodes:
            cmd = self._jvm_command(java, jars, STORAGE_TOOL_CLASS)
            cmd += ["format", f"--cluster-id={self.cluster_id}", "--config", str(node.props)]
            if self.sasl:
                user, password = self.admin_login()
                cmd += ["--add-scram", f"{SASL_MECHANISM}=[name={user},password={password}]"]
            procs.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        failures = []
        for node, proc in procs:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                failures.append(f"node {node.node_id}: {java_error_line(out.decode(errors='replace'))}")
        if failures:
            raise KafkaClusterError("formatting KRaft storage failed: " + "; ".join(failures))

    def _launch(self, i: int, java: str, jars: Path) -> None:
        node = self._nodes[i]
        cmd = self._jvm_command(java, jars, MAIN_CLASS) + [str(node.props)]
        with open(node.log_file, "ab") as log:
            log.write(f"\n==== hastream: starting broker {i} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=node.dir,
                start_new_session=True,
                close_fds=True,
            )
        self._procs[i] = proc
        self._pids[i] = proc.pid

    def _alive(self, i: int) -> bool:
        proc = self._procs[i]
        if proc is not None:
            return proc.poll() is None
        pid = self._pids[i]
        return pid is not None and bool(self._nodes) and _pid_is_broker(pid, self._nodes[i].props)

    def _signal(self, i: int, sig: signal.Signals) -> None:
        pid = self._pids[i]
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # The JVM leads its own process group, so this reaches any helper it forked too.
            os.killpg(pid, sig)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    def _wait_gone(self, i: int, deadline: float) -> bool:
        while self._alive(i):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _reap(self, i: int) -> None:
        proc = self._procs[i]
        if proc is not None and proc.poll() is not None:
            self._procs[i] = None
            self._pids[i] = None
        elif proc is None and self._pids[i] is not None and not self._alive(i):
            self._pids[i] = None

    def _write_state(self) -> None:
        state = {
            "bootstrap": self.bootstrap,
            "brokers": self.brokers,
            "pids": self._pids,
            "data_dir": str(self.data_dir),
            "host": self.host,
            "cluster_id": self.cluster_id,
            "kafka_version": KAFKA_VERSION,
            "sasl": self.sasl,
            "nodes": [
                {"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port, "dir": str(n.dir)}
                for n in self._nodes
            ],
        }
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_file)

    def _failure_reason(self, i: int) -> str:
        """Why broker ``i`` died, from the output of its latest launch."""
        try:
            text = self._nodes[i].log_file.read_text(errors="replace")
        except OSError:
            return "no log"
        return java_error_line(text.rsplit("==== hastream: starting broker", 1)[-1])

    def _wait_ready(self, timeout: float, expect: int, must_see: int | None = None) -> None:
        """Block until a client sees ``expect`` brokers (and ``must_see`` among them).

        Readiness means "clients work", so it is checked the way a client would: broker metadata
        from an AdminClient, which lists only registered, unfenced brokers.
        """
        from confluent_kafka.admin import AdminClient

        class _NotReady(Exception):
            pass

        def check() -> None:
            for i in range(self.brokers):
                if self._pids[i] is not None and not self._alive(i):
                    raise KafkaClusterError(
                        f"broker {i} exited during startup: {self._failure_reason(i)} (log: {self._nodes[i].log_file})"
                    )
            if not any(port_open(f"{self.host}:{n.port}") for n in self._nodes):
                raise _NotReady("no broker port is accepting connections yet")
            conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": _quiet_rdkafka, **self.client_conf()}
            admin = AdminClient(conf)
            try:
                meta = admin.list_topics(timeout=5)
            except Exception as exc:
                raise _NotReady(str(exc)) from exc
            seen = set(meta.brokers)
            if len(seen) < expect or (must_see is not None and must_see not in seen):
                raise _NotReady(f"clients see brokers {sorted(seen)}, waiting for {expect}")

        retrying = Retrying(
            retry=retry_if_exception_type(_NotReady),
            stop=stop_after_delay(timeout),
            wait=wait_exponential(multiplier=0.05, max=0.5),
            reraise=True,
        )
        try:
            retrying(check)
        except _NotReady as exc:
            raise KafkaClusterError(
                f"Kafka did not become ready within {timeout:.0f}s ({exc}); logs: {self.data_dir}/broker-*/broker.log"
            ) from None


if __name__ == "__main__":  # pragma: no cover - manual smoke run
    logging.basicConfig(level=logging.INFO)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    t0 = time.monotonic()
    with KafkaCluster(brokers=n, data_dir=Path(sys.argv[2]) if len(sys.argv) > 2 else None).start() as c:
        print(f"{c.bootstrap} ready in {time.monotonic() - t0:.1f}s; pids {c.pids}")
