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
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import os
import socket
import ssl
import time
from pathlib import Path
from typing import Any, Callable, ClassVar, cast

import faust
from aiohttp.web import TCPSite
from faust.web import Request, Response, View
from faust.web.drivers.aiohttp import Web as AiohttpWeb
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.control.messages import COORDINATOR, ControlKind, ControlMessage, Heartbeat, now_ms
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState, Role
from services.coordinator.metrics import CoordinatorMetrics, replica_counts
from services.coordinator.names import TABLES, app_id
from services.coordinator.page import STATUS_HTML
from services.coordinator.takeover import Order, Takeovers
from services.coordinator.trims import Trims
from services.core import metrics
from services.core.admin import TopicSpec, broker_count, ensure_topics
from services.core.errors import DecodeError, HastreamError
from services.core.kafka import SASL_MECHANISM, Login, env_login
from services.core.logs import setup_logging
from services.dpc.consistency import LEASE_MS, Coordination, Grant
from services.ha.acks import TOPIC_CONFIG as ACKS_TOPIC_CONFIG
from services.ha.acks import Ack
from services.log.trim import trim_before
from services.node.fence import claim_epoch
from services.spec import Spec

log = logging.getLogger("hastream.coordinator")

DEFAULT_PORT = 6066
PORT_ENV = "HASTREAM_COORDINATOR_PORT"


class AnotherCoordinator(HastreamError, RuntimeError):
    """A coordinator of the same spec is already running."""


class _Web(AiohttpWeb):
    """faust's aiohttp web driver without its production index, so ``/`` is our status page,
    and able to fall back to a free port when the default one is taken."""

    production_blueprints: ClassVar[list] = []

    async def start_server(self) -> None:
        await self._runner.setup()
        app = cast(_App, self.app)
        try:
            await TCPSite(self._runner, app.conf.web_bind, app.conf.web_port).start()
        except OSError as e:
            if not app.web_port_fallback:
                raise
            await TCPSite(self._runner, app.conf.web_bind, 0).start()
            log.warning("port %d is taken (%s): serving on a free port", app.conf.web_port, e.strerror)
        port = int(self._runner.addresses[-1][1])
        log.info("status page on http://localhost:%d/ (JSON: /status, Prometheus: /metrics)", port)
        if app.metrics_port is not None:
            await self._serve_metrics(app.metrics_port)
        if app.on_web_bound is not None:
            app.on_web_bound(port)

    async def _serve_metrics(self, port: int) -> None:
        """The same views on the metrics port the launcher gave (loopback unless told otherwise)."""
        try:
            await TCPSite(self._runner, metrics.env_host(), port).start()
        except OSError as e:
            log.warning("metrics port %d is taken (%s): /metrics only on the status page's port", port, e.strerror)
            return
        log.info("metrics on http://%s:%d/metrics", metrics.env_host(), port)


class _App(faust.App):
    web_port_fallback = False  # True: the port was not asked for, any free one will do
    on_web_bound: Callable[[int], None] | None = None
    metrics_port: int | None = None  # a second port serving the views, for Prometheus

    def _new_web(self) -> AiohttpWeb:
        return _Web(self)


def broker_credentials(login: Login | None) -> faust.SASLCredentials | None:
    """faust's (aiokafka's) form of the login every other hastream client takes from the environment."""
    if login is None:
        return None
    ssl_context = ssl.create_default_context() if login.protocol == "SASL_SSL" else None
    return faust.SASLCredentials(
        username=login.username, password=login.password, mechanism=SASL_MECHANISM, ssl_context=ssl_context
    )


HOST_ENV = "HASTREAM_STATUS_HOST"
DEFAULT_HOST = "127.0.0.1"  # the page has no authentication: this machine only, unless asked


def env_host() -> str:
    """$HASTREAM_STATUS_HOST, else 127.0.0.1: the address the status page listens on."""
    return os.environ.get(HOST_ENV, "") or DEFAULT_HOST


def env_port() -> int | None:
    """$HASTREAM_COORDINATOR_PORT, if set."""
    raw = os.environ.get(PORT_ENV, "")
    try:
        return int(raw) if raw else None
    except ValueError:
        raise ValueError(f"{PORT_ENV}={raw!r} must be a port number") from None


def port_free(port: int, host: str = DEFAULT_HOST) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_file(data_dir: Path) -> Path:
    """Where a running coordinator writes its port and pid, so ``hastream status`` finds it."""
    return Path(data_dir) / "coordinator.json"


ROLES = frozenset(r.value for r in Role)


def takeovers_of(spec: Spec, bootstrap: str) -> Takeovers:
    """The role table of the spec's HA-scheme nodes; new primaries' epochs are claimed on the heartbeat topic."""
    nodes = {n: (nd.replicas, nd.ha.detection_ms / 1000) for n, nd in spec.nodes.items() if nd.ha.scheme.kind.takeovers}

    def claim(node: str, partition: int, replica: int) -> int:
        return claim_epoch(bootstrap, spec.heartbeat_topic, node, partition, replica)

    return Takeovers(nodes, claim)


def expected_replicas(spec: Spec) -> list[tuple[str, int, int]]:
    """(node, partition, replica) of every node process the spec deploys."""
    return [
        (n, p, r) for n, nd in spec.nodes.items() for r in range(nd.replicas) for p in range(spec.node_partitions(n))
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
        name = app_id(spec)
        self.app = app = _App(
            name,
            broker=[f"kafka://{h.strip()}" for h in bootstrap.split(",") if h.strip()],
            broker_credentials=broker_credentials(env_login()),
            store="memory://",  # the changelog topics are the durable copy; recovery replays them
            datadir=str(self.data_dir),
            key_serializer="raw",
            value_serializer="raw",
            topic_partitions=1,  # the control plane topics have one partition: one order for all
            topic_replication_factor=rf,
            # Static membership: a restarted coordinator (same instance id) replaces its dead
            # predecessor in the group at once instead of waiting for its session to expire.
            consumer_group_instance_id=f"{name}-0",
            broker_session_timeout=10.0,
            broker_heartbeat_interval=1.0,
            broker_commit_interval=1.0,
            consumer_auto_offset_reset="earliest",
            web_enabled=True,
            web_port=self.port,
            web_bind=bind,
            web_host=web_host,
            web_router_enabled=False,
            web_tables_enabled=False,
        )
        app.web_port_fallback = port is None
        app.metrics_port = metrics.env_port()
        app.on_web_bound = self._on_web_bound
        self.heartbeats = app.topic(
            spec.heartbeat_topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )
        self.control = app.topic(
            spec.control_topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )
        # Keys (str) and values (dicts) go to the changelog as JSON. use_partitioner: timers write
        # too, outside any stream event (all topics have one partition, so nothing moves).
        table_kw: dict[str, Any] = dict(default=None, partitions=1, use_partitioner=True)
        replicas, recon = TABLES
        self.replicas = app.Table(replicas, help="node/pX/rY -> DPC state of one node replica partition", **table_kw)
        self.recon = app.Table(recon, help="node/pX/rY -> reconciliation request / grant", **table_kw)
        self.logic = Coordination(self.replicas, self.recon, spec.dpc.failure_timeout, lease_ms)
        self.takeovers = takeovers_of(spec, bootstrap)
        self.orders_sent = 0
        self.trims = Trims(spec)
        self._wire()

    # -- faust wiring ---------------------------------------------------------------------
    def _wire(self) -> None:
        app = self.app

        @app.agent(self.heartbeats, name="heartbeats")
        async def on_heartbeats(stream: Any) -> None:
            async for value in stream:
                try:
                    beat = Heartbeat.decode(value)
                except (DecodeError, ValueError) as e:
                    log.warning("skipping a heartbeat that cannot be read: %s", e)
                    continue
                self.takeovers.intake(time.monotonic())  # the coordinator reads heartbeats: silence means something
                if beat.node in self.takeovers.nodes and self.caught_up:
                    reported = (Role(beat.role), beat.epoch) if beat.role in ROLES else None
                    now = time.monotonic()
                    sent_at = now - max(0.0, (now_ms() - beat.sent_ms) / 1000)  # read late if the intake lags
                    heard = self.takeovers.heard(beat.node, beat.partition, beat.replica, now, reported, sent_at)
                    await self._send_orders(heard)
                if beat.node == COORDINATOR:
                    if not self.caught_up and beat.pid == os.getpid() and beat.epoch == self.started_ms:
                        # Our own first heartbeat came back: everything queued before it is read.
                        self.caught_up = True
                        self.logic.caught_up(now_ms())
                        log.info(
                            "coordinator ready: heartbeat backlog read; %d replicas, %d reconciliation entries",
                            len(list(self.replicas.keys())),
                            len(list(self.recon.keys())),
                        )
                    continue
                self.logic.on_heartbeat(beat.as_dict(), now_ms(), fresh=self.caught_up)

        @app.agent(self.control, name="control")
        async def on_control(stream: Any) -> None:
            async for value in stream:
                try:
                    msg = ControlMessage.decode(value)
                except (DecodeError, ValueError) as e:
                    log.warning("skipping a control message that cannot be read: %s", e)
                    continue
                if msg.kind in (ControlKind.GRANT, ControlKind.ROLE, ControlKind.TRIM):
                    continue  # our own, or between the replicas of a node
                grants = self.logic.on_control(msg.as_dict(), now_ms())
                log.info(
                    "%s from %s/p%d/r%d (stagger=%s) -> %s",
                    msg.kind.value,
                    msg.node,
                    msg.partition,
                    msg.replica,
                    msg.stagger,
                    ", ".join(g.key for g in grants) or "no grant",
                )
                await self._send_grants(grants)

        @app.timer(interval=self.interval_s, name="tick")
        async def tick() -> None:
            if not self.ready():
                return
            now = now_ms()
            if self.ready_since is None:
                self.ready_since = now
                log.info(
                    "tables recovered: %d replicas, %d reconciliation entries",
                    len(list(self.replicas.keys())),
                    len(list(self.recon.keys())),
                )
            await self._beat(now)
            # Detect failures only once the heartbeats that queued up while we were down are
            # read, or a restart would flag live replicas FAILED for a moment.
            failed = self.logic.mark_failures(now) if self.caught_up else []
            for key in failed:
                log.warning("replica %s FAILED: no heartbeat for more than %d ms", key, self.spec.dpc.failure_timeout)
            for key in self.logic.expire_leases(now):
                log.warning("grant of %s released: lease of %d ms expired", key, self.logic.lease_ms)
            await self._send_grants(self.logic.decide_all(now))

        if self.takeovers.nodes:
            every = min(self.spec.nodes[n].ha.heartbeat_ms for n in self.takeovers.nodes)

            @app.timer(interval=every / 4000, name="takeovers")
            async def takeovers() -> None:
                if self.ready() and self.caught_up:
                    await self._send_orders(self.takeovers.check(time.monotonic()))

        if self.trims.readers:
            self._wire_trims()

        coordinator = self

        @app.page("/status")
        class StatusView(View):
            async def get(self, request: Request) -> Response:
                return self.json(coordinator.status())

        @app.page("/metrics")
        class MetricsView(View):
            async def get(self, request: Request) -> Response:
                body = generate_latest(coordinator.registry)
                return self.bytes(body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        @app.page("/")
        class IndexView(View):
            async def get(self, request: Request) -> Response:
                return self.html(STATUS_HTML.replace("{{title}}", html.escape(coordinator.spec.name)))

    def _wire_trims(self) -> None:
        """Upstream backup: hear the level-1 acks; every interval, trim each log its readers all acked."""
        app = self.app
        every = min(nd.ha.interval_ms for nd in self.spec.nodes.values() if nd.ha.scheme.kind.trims_inputs)
        acks = app.topic(
            self.spec.acks_topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )

        @app.agent(acks, name="acks")
        async def on_acks(stream: Any) -> None:
            async for value in stream:
                try:
                    self.trims.heard(Ack.decode(value))
                except DecodeError as e:
                    log.warning("skipping an ack that cannot be read: %s", e)

        @app.timer(interval=every / 1000, name="trims")
        async def trims() -> None:
            if not (self.ready() and self.caught_up):
                return
            loop = asyncio.get_running_loop()
            for (topic, p), offset in self.trims.due(self.takeovers.epoch).items():
                start = await loop.run_in_executor(None, trim_before, self.bootstrap, topic, p, offset)
                self.trims.trimmed((topic, p), start)

    def ready(self) -> bool:
        """Partitions assigned and tables recovered from their changelogs."""
        app = self.app
        tables: Any = app.tables  # faust's TableManager; its type stub lacks ``recovery``
        recovery = tables.recovery
        return recovery.completed.is_set() and not app.rebalancing and not recovery.in_recovery

    async def _send_grants(self, grants: list[Grant]) -> None:
        for g in grants:
            log.info("GRANT %s (stagger=%s)", g.key, g.stagger)
            self.grants_sent += 1
            grant = ControlMessage(ControlKind.GRANT, g.node, g.partition, g.replica, g.stagger, round_ms=g.round_ms)
            await self.control.send(key=g.node.encode(), value=grant.encode())

    async def _send_orders(self, orders: list[Order]) -> None:
        for o in orders:
            log.info("%s/p%d/r%d is %s at epoch %d", o.node, o.partition, o.replica, o.role.value, o.epoch)
            self.orders_sent += 1
            msg = ControlMessage(ControlKind.ROLE, o.node, o.partition, o.replica, role=o.role.value, epoch=o.epoch)
            await self.control.send(key=o.node.encode(), value=msg.encode())

    async def _beat(self, now: int) -> None:
        beat = Heartbeat(COORDINATOR, 0, 0, NodeState.STABLE, now, self.started_ms, os.getpid())
        await self.heartbeats.send(key=COORDINATOR.encode(), value=beat.encode())

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
                "trimmed": self.trims.table(),
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


def wait_ready(url: str, timeout: float = 30.0) -> dict[str, Any]:
    """Poll a coordinator's /status until it reports ready (used by tests and tools)."""
    from services.coordinator.client import fetch_status

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            st = fetch_status(url, timeout=1.0)
            if st.get("ready"):
                return st
        except OSError as e:
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"coordinator at {url} not ready after {timeout:.0f} s ({last})")
