"""The coordinator as a faust-streaming app: agents, changelog-backed tables, timers, web views.

One process per deployment. It follows ``<spec>.heartbeats`` and ``<spec>.control`` (raw
Avro bytes, decoded with the project's codecs), keeps replica states and the reconciliation
queue in two faust Tables (``replicas``, ``reconciliation``) whose changelog topics let a
restarted coordinator, even after kill -9, recover where it stopped, marks silent replicas
FAILED from a timer, answers REQUESTs with GRANTs (``services.dpc.consistency`` decides),
sends its own heartbeat (node ``coordinator``) so nodes can tell it is alive, and serves
``GET /status`` (JSON) and ``GET /`` (a live HTML page).

Nodes never depend on it on the data path: only reconciliation waits for its GRANT, and a
node that sees no coordinator heartbeat falls back to its local rule.

Kafka 4: faust 0.15.3 with aiokafka 0.14 speaks protocol versions Kafka 4.1 kept. What
needed care is restart speed: a kill -9'd member stays in the consumer group until its
session times out, and a restarted coordinator would wait that long (faust's default: 60 s)
before it gets its partitions. The app therefore uses
static group membership (``consumer_group_instance_id``): the restarted process takes over
the dead member's place at once, without a rebalance.

This module holds the app's configuration, its tables and its run; each protocol's agents,
timers and pages are wired by its own module in ``services.coordinator.wiring``, and the web
server is ``services.coordinator.web``.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from pathlib import Path
from typing import Any

import faust

from services.control.messages import COORDINATOR, now_ms
from services.control.monitor import ReplicaMonitor
from services.coordinator import wiring
from services.coordinator.address import DEFAULT_HOST, DEFAULT_PORT, port_file
from services.coordinator.health import Health
from services.coordinator.metrics import CoordinatorMetrics, replica_counts
from services.coordinator.names import TABLES, app_id
from services.coordinator.trims import Trims
from services.coordinator.web import WebApp
from services.coordinator.wiring.raw import raw_topic
from services.coordinator.wiring.takeovers import takeovers_of
from services.core import metrics
from services.core.admin import TopicSpec, broker_count, ensure_topics
from services.core.errors import HastreamError
from services.core.login import SASL_MECHANISM, Login, env_login
from services.core.logs import setup_logging
from services.dpc.consistency import LEASE_MS, Coordination
from services.log.retention import ACKS as ACKS_TOPIC_CONFIG
from services.spec import Spec
from services.spec.egress import replicated


class AnotherCoordinator(HastreamError, RuntimeError):
    """A coordinator of the same spec is already running."""


def broker_credentials(login: Login | None) -> faust.SASLCredentials | None:
    """faust's (aiokafka's) form of the login every other hastream client takes from the environment."""
    if login is None:
        return None
    ssl_context = ssl.create_default_context() if login.protocol == "SASL_SSL" else None
    return faust.SASLCredentials(
        username=login.username, password=login.password, mechanism=SASL_MECHANISM, ssl_context=ssl_context
    )


def faust_app(
    name: str, bootstrap: str, data_dir: Path, replication: int, *, port: int, bind: str, web_host: str
) -> WebApp:
    """The app ``name`` on the brokers of ``bootstrap``, its web server on ``bind``:``port``."""
    return WebApp(
        name,
        broker=[f"kafka://{h.strip()}" for h in bootstrap.split(",") if h.strip()],
        broker_credentials=broker_credentials(env_login()),
        store="memory://",  # the changelog topics are the durable copy; recovery replays them
        datadir=str(data_dir),
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=1,  # the control plane topics have one partition: one order for all
        topic_replication_factor=replication,
        # Static membership: a restarted coordinator (same instance id) replaces its dead
        # predecessor in the group at once instead of waiting for its session to expire.
        consumer_group_instance_id=f"{name}-0",
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        broker_commit_interval=1.0,
        consumer_auto_offset_reset="earliest",
        web_enabled=True,
        web_port=port,
        web_bind=bind,
        web_host=web_host,
        web_router_enabled=False,
        web_tables_enabled=False,
    )


def state_tables(app: faust.App) -> tuple[Any, Any]:
    """The ``replicas`` and ``reconciliation`` tables, each backed by its changelog topic."""
    # Keys (str) and values (dicts) go to the changelog as JSON. use_partitioner: timers write
    # too, outside any stream event (all topics have one partition, so nothing moves).
    table_kw: dict[str, Any] = dict(default=None, partitions=1, use_partitioner=True)
    replicas, recon = TABLES
    return (
        app.Table(replicas, help="node/pX/rY -> DPC state of one node replica partition", **table_kw),
        app.Table(recon, help="node/pX/rY -> reconciliation request / grant", **table_kw),
    )


def expected_replicas(spec: Spec) -> list[tuple[str, int, int]]:
    """(node, partition, replica) of every node and egress process the spec deploys."""
    return [
        (n, p, r) for n, replicas, partitions in replicated(spec) for r in range(replicas) for p in range(partitions)
    ]


class Coordinator:
    """Builds the faust app for one spec; ``run()`` blocks until SIGTERM / SIGINT."""

    def __init__(
        self,
        spec: Spec,
        bootstrap: str,
        *,
        port: int | None = None,
        data_dir: Path,
        lease_ms: int = LEASE_MS,
        replication: int | None = None,
        web_host: str = "localhost",
        bind: str = DEFAULT_HOST,
    ) -> None:
        """``port`` None: 6066, or a free port while 6066 is taken (another deployment's coordinator).
        ``bind``: the address the status page listens on (0.0.0.0 exposes it to every network)."""
        self.spec = spec
        self.bootstrap = bootstrap
        self.port = port if port is not None else DEFAULT_PORT
        self.data_dir = Path(data_dir)
        self.interval_s = spec.dpc.heartbeat_interval / 1000.0
        self.started_ms = now_ms()
        self.ready_since: int | None = None  # when the tables were recovered
        self.caught_up = False  # our own heartbeat came back: the heartbeat backlog is read
        self.expected = expected_replicas(spec)
        self.grants_sent = 0
        self.registry = metrics.registry_of(CoordinatorMetrics(spec.name, self.status))
        rf = replication if replication is not None else min(3, broker_count(bootstrap))
        self.app = app = faust_app(
            app_id(spec), bootstrap, self.data_dir, rf, port=self.port, bind=bind, web_host=web_host
        )
        app.web_port_fallback = port is None
        app.metrics_port = metrics.env_port()
        app.on_web_bound = self._on_web_bound
        self.heartbeats = raw_topic(app, spec.heartbeat_topic)
        self.control = raw_topic(app, spec.control_topic)
        self.replicas, self.recon = state_tables(app)
        self.logic = Coordination(self.replicas, self.recon, spec.dpc.failure_timeout, lease_ms)
        self.takeovers = takeovers_of(spec)
        self.orders_sent = 0
        self.trims = Trims(spec)
        self.health = Health()
        wiring.wire(app, self)

    def ready(self) -> bool:
        """Partitions assigned and tables recovered from their changelogs."""
        app = self.app
        tables: Any = app.tables  # faust's TableManager; its type stub lacks ``recovery``
        recovery = tables.recovery
        return recovery.completed.is_set() and not app.rebalancing and not recovery.in_recovery

    def status(self) -> dict[str, Any]:
        now = now_ms()
        body = self.logic.status(now, self.expected)
        body.update(
            {
                "spec": self.spec.name,
                "ready": self.ready_since is not None and self.caught_up,
                "grants_sent": self.grants_sent,
                "orders_sent": self.orders_sent,
                "takeovers": self.takeovers.table(),
                "takeovers_total": self.takeovers.takeovers,
                "ha_partitions": self.takeovers.health(time.monotonic()),
                "trimmed": self.trims.table(),
                "standby": self.health.standby(now),
                "crash_looping": [
                    {"node": n, "partition": p, "replica": r} for n, p, r in self.health.looping(time.monotonic())
                ],
                "trims": self.trims.trims,
                "schemes": {n: nd.ha.scheme.value for n, nd in self.spec.nodes.items()},
                "replicas_by_state": replica_counts(body["replicas"]),
                "pid": os.getpid(),
                "started_ms": self.started_ms,
                "heartbeat_interval_ms": self.spec.dpc.heartbeat_interval,
                "heartbeat_topic": self.spec.heartbeat_topic,
                "control_topic": self.spec.control_topic,
            }
        )
        return body

    # -- running ----------------------------------------------------------------------
    def provision(self) -> None:
        """Create the heartbeats and control topics and the tables' changelogs if missing.

        Faust creates its changelogs itself, but while it joins its group: a changelog that
        is not in the metadata yet when a grant is first written makes that write raise, and
        the control agent crashes on every message after it (no GRANT ever goes out). Made
        here, they exist before the worker starts.
        """
        rf = self.app.conf.topic_replication_factor
        cfg = {"min.insync.replicas": "2"} if rf >= 3 else {}
        changelogs = [t.changelog_topic.get_topic_name() for t in (self.replicas, self.recon)]
        ensure_topics(
            self.bootstrap,
            [TopicSpec(self.spec.heartbeat_topic, 1, rf, cfg), TopicSpec(self.spec.control_topic, 1, rf, cfg)]
            + [TopicSpec(name, 1, rf, {**cfg, "cleanup.policy": "compact"}) for name in changelogs]
            + ([TopicSpec(self.spec.acks_topic, 1, rf, {**cfg, **ACKS_TOPIC_CONFIG})] if self.trims.readers else []),
        )

    def check_alone(self) -> None:
        """Refuse to start next to a live coordinator of the same spec.

        Both would share one static group member id and take the partitions from each other in
        turns. A coordinator whose heartbeat is recent but stops (killed a moment ago) is fine.
        """
        mon = ReplicaMonitor(self.bootstrap, self.spec.heartbeat_topic, self.spec.dpc.failure_timeout / 1000.0)
        try:
            time.sleep(2 * self.interval_s)  # the recent heartbeats arrive
            first = mon.get(COORDINATOR, 0, 0)
            if first is None or not first.alive(mon.timeout_s):
                return
            deadline = time.monotonic() + mon.timeout_s + self.interval_s
            while time.monotonic() < deadline:
                cur = mon.get(COORDINATOR, 0, 0)
                if cur is not None and cur.sent_ms > first.sent_ms:
                    raise AnotherCoordinator(
                        f"another coordinator of '{self.spec.name}' is running (pid {cur.pid}, "
                        f"heartbeats on {self.spec.heartbeat_topic}): stop it first"
                    )
                time.sleep(self.interval_s / 2)
        finally:
            mon.close()

    def _on_web_bound(self, port: int) -> None:
        self.port = port
        port_file(self.data_dir).write_text(
            json.dumps({"spec": self.spec.name, "port": port, "pid": os.getpid(), "started_ms": self.started_ms})
        )

    def run(self, loglevel: str = "info") -> None:
        setup_logging("coordinator", loglevel)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.provision()
        self.check_alone()
        # Our log format, not faust's: the worker leaves the logging set up above alone.
        worker = faust.Worker(self.app, loglevel=loglevel, quiet=True, override_logging=False)
        worker.execute_from_commandline()
