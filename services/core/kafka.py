"""Every Kafka client hastream builds: the batched consumer and producer of the data path, and plain consumers.

One place sets the client configuration (logging through Python, no auto commit, no
auto-created topics), so every service, client and tool talks to Kafka the same way.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from tenacity import RetryCallState, retry, retry_if_exception, stop_after_delay, wait_exponential

from services.core.errors import TrimmedError
from services.core.tuples import RawHeaders

log = logging.getLogger(__name__)
# Where the one line per broker outage goes ("waiting for the Kafka broker at ..."): the
# services' logs, and a CLI command's stderr.
WAIT_LOG = logging.getLogger("hastream.kafka")

# librdkafka's log lines by facility and its errors by name, in this process: counted here
# instead of printed, for a metrics module to export.
RDKAFKA_LOG_LINES: Counter[str] = Counter()
RDKAFKA_ERRORS: Counter[str] = Counter()

# Errors of a broker that is starting, failing over or briefly unreachable: the call is
# made again with backoff. Codes starting with _ are librdkafka's own (a connection torn
# down when a broker dies is _DESTROY_BROKER, for instance); the others come from brokers.
TRANSIENT = {
    KafkaError._DESTROY_BROKER,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._TIMED_OUT_QUEUE,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
    KafkaError._NODE_UPDATE,
    KafkaError._WAIT_CACHE,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_CONTROLLER,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.KAFKA_STORAGE_ERROR,
}


# Errors that say a broker cannot be reached: librdkafka reports them on every reconnect
# attempt, so they are reported once per outage instead.
UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE, KafkaError._DESTROY_BROKER}
# A broker as librdkafka names it: "host:port/id", with "sasl_plaintext://" before it on a SASL listener.
_CONNECTION_LINE = re.compile(r"(?:^|\]: )(?:[a-z_]+://)?([\w.\-]+:\d+|\[[\w:.]+\]:\d+)/\S*: (.*)$")
# librdkafka's words for a login the broker refused: a wrong password or unknown user, or a
# broker without SASL on that port ("handshake failed: ... broker's supported mechanisms: ").
_LOGIN_FAILED = re.compile(r"SASL (?:authentication error|\S+ mechanism handshake failed): ")
_LOST = ("Disconnected", "Receive failed", "Send failed", "Connection reset")  # the lines a dying broker leaves


_TIMING = re.compile(r"\s*\(after .*\)$")  # librdkafka's "(after 3ms in state CONNECT)" at a line's end


def _untimed(text: str) -> str:
    """A librdkafka report without its timing suffix, so one outage reads the same every time."""
    return _TIMING.sub("", text)


_CONNECT_TO = re.compile(r"(Connect to ipv[46]#(\S+) failed: .*)$")  # e.g. from the GroupCoordinator thread


def _connection_line(text: str) -> tuple[str, str] | None:
    """(broker address, what happened) if ``text`` is librdkafka's line about a broker connection."""
    match = _CONNECTION_LINE.search(text)
    if match is None:
        connect = _CONNECT_TO.search(text)
        return (connect.group(2), connect.group(1)) if connect is not None else None
    what = match.group(2)
    if "Connect to" in what or "resolve" in what or any(w in what for w in _LOST):
        return match.group(1), what
    return None


def _refused(what: str) -> str | None:
    """Why a connection attempt failed ("Connection refused"), or None if ``what`` is no failed attempt."""
    if "Connect to" not in what and "resolve" not in what:
        return None
    return _untimed(what.rsplit(": ", 1)[-1])


def port_open(address: str) -> bool:
    """Whether something accepts TCP connections at ``host:port`` (a broker's listener, once it is up)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=0.5):
            return True
    except (OSError, ValueError):
        return False


class BrokerWait:
    """One line when a broker stops answering and one when it accepts connections again.

    librdkafka retries a lost broker every second or faster and reports each failed attempt;
    a user needs to know what the program waits for, once, and when the wait is over.
    """

    # librdkafka hands its log lines over when the client is next polled, so failed attempts
    # made before the broker came back can arrive just after: not a new outage.
    STALE_S = 5.0

    def __init__(self, logger: logging.Logger = WAIT_LOG, probe_s: float = 0.5) -> None:
        self.logger, self.probe_s = logger, probe_s
        self._since: dict[str, float] = {}
        self._back: dict[str, float] = {}
        self._lock = threading.Lock()

    def waiting(self) -> list[str]:
        """The broker addresses being waited for now."""
        with self._lock:
            return sorted(self._since)

    def note(self, address: str, reason: str) -> None:
        """A connection to ``address`` failed: say so if this starts an outage, and watch for its end."""
        with self._lock:
            now = time.monotonic()
            if address in self._since or now - self._back.get(address, -self.STALE_S) < self.STALE_S:
                return
            self._since[address] = now
        self.logger.warning("waiting for the Kafka broker at %s ... (%s)", address, reason)
        threading.Thread(target=self._watch, args=(address,), name=f"broker-wait-{address}", daemon=True).start()

    def _watch(self, address: str) -> None:
        while not port_open(address):
            time.sleep(self.probe_s)
        with self._lock:
            since = self._since.pop(address, time.monotonic())
            self._back[address] = time.monotonic()
        self.logger.warning(
            "the Kafka broker at %s accepts connections again (after %.1f s)", address, time.monotonic() - since
        )


BROKER_WAIT = BrokerWait()


# Where the one line per refused login goes: a service's log; a CLI command says it itself.
LOGIN_LOG = logging.getLogger("hastream.kafka.login")


class LoginRefusals:
    """One line when a broker refuses this process's login (wrong password, unknown user, or a
    broker without SASL), instead of librdkafka's line on every reconnect attempt."""

    def __init__(self, logger: logging.Logger = LOGIN_LOG) -> None:
        self.logger = logger
        self._by_address: dict[str, str] = {}
        self._lock = threading.Lock()

    def note(self, address: str, reason: str) -> None:
        with self._lock:
            if address in self._by_address:
                return
            self._by_address[address] = reason
        login = env_login()
        who = f"user '{login.username}'" if login is not None else "a client without a login"
        self.logger.error("the Kafka broker at %s refused the login of %s: %s", address, who, reason)

    def reason(self, bootstrap: str | None = None) -> str | None:
        """Why a broker (of ``bootstrap``, or any) refused the login, if one did."""
        with self._lock:
            for address, reason in self._by_address.items():
                if bootstrap is None or address in bootstrap.split(","):
                    return reason
        return None


LOGIN_REFUSALS = LoginRefusals()


def _login_failure(text: str) -> tuple[str, str] | None:
    """(broker address, reason) if ``text`` is librdkafka's report of a failed SASL login."""
    failed = _LOGIN_FAILED.search(text)
    if failed is None or "Local: " in text[failed.end() :]:
        return None  # a connection lost while logging in (the client closed, say) is no refusal
    match = _CONNECTION_LINE.search(text)
    address = match.group(1) if match is not None else "?"
    reason = _untimed(text[failed.end() :]).strip()
    if re.search(r"supported mechanisms:\s*$", reason):
        reason = "it takes no SASL logins on that port (a broker started without --sasl?)"
    return address, reason


class ClientLog:
    """The ``logger`` of every client: counts librdkafka's lines, turns connection failures
    into ``BROKER_WAIT``'s one line, and passes the rest to a Python logger."""

    def __init__(self, logger: logging.Logger, wait: BrokerWait = BROKER_WAIT) -> None:
        self.logger, self.wait = logger, wait

    def log(self, level: int, msg: str, *args: object) -> None:
        facility = str(args[0]) if args else "?"
        RDKAFKA_LOG_LINES[facility] += 1
        text = str(args[-1]) if args else msg
        if _LOGIN_FAILED.search(text):  # counted; a refusal is said once, an interrupted login is no news
            refused = _login_failure(text)
            if refused is not None:
                LOGIN_REFUSALS.note(*refused)
            return
        line = _connection_line(text)
        if line is None:
            self.logger.log(level, msg, *args)
            return
        address, what = line
        reason = _refused(what)
        if reason is not None:
            self.wait.note(address, reason)

    def setLevel(self, level: int) -> None:  # noqa: N802 - the logging.Logger name callers use
        self.logger.setLevel(level)


# librdkafka's own log lines go through Python logging (not raw to stderr), so each program
# decides what to show: services log them, CLI commands show only errors.
RDKAFKA_LOG = ClientLog(logging.getLogger("hastream.librdkafka"))


def on_client_error(err: KafkaError) -> None:
    """The ``error_cb`` of every client: counted; an unreachable broker is said once per outage."""
    RDKAFKA_ERRORS[err.name()] += 1
    if err.code() == KafkaError._AUTHENTICATION:
        refused = _login_failure(err.str())
        if refused is not None:
            LOGIN_REFUSALS.note(*refused)
        else:
            log.debug("Kafka client login interrupted: %s", err)
        return
    if err.code() not in UNREACHABLE:
        log.log(logging.ERROR if err.fatal() else logging.WARNING, "Kafka client error: %s", err)
        return
    line = _connection_line(err.str())
    reason = _refused(line[1]) if line is not None else None
    if line is not None and reason is not None:
        BROKER_WAIT.note(line[0], reason)


# Lines of other Kafka clients' loggers (aiokafka, under the coordinator) dropped as reconnect chatter.
SUPPRESSED_LOG_LINES: Counter[str] = Counter()
_REFUSED_AT = re.compile(r"Connect call failed \('([^']+)', (\d+)\)")
_WHILE_DOWN = ("NodeNotReadyError", "Unable to update metadata", "Unable connect to node", "KafkaConnectionError")


class ChatterFilter(logging.Filter):
    """Drops aiokafka's per-attempt lines about a broker it cannot reach; ``BROKER_WAIT`` says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        refused = _REFUSED_AT.search(text)
        if refused is not None:
            BROKER_WAIT.note(f"{refused.group(1)}:{refused.group(2)}", "Connection refused")
        if refused is None and not any(w in text for w in _WHILE_DOWN):
            return True
        SUPPRESSED_LOG_LINES[record.name] += 1
        return False


def quiet_aiokafka() -> None:
    """Filter the aiokafka loggers that report every failed reconnect (client, fetcher, producer, group)."""
    for name in (
        "aiokafka",
        "aiokafka.conn",
        "aiokafka.consumer.fetcher",
        "aiokafka.consumer.group_coordinator",
        "aiokafka.producer.sender",
    ):
        logging.getLogger(name).addFilter(ChatterFilter())


# A client's login, from its environment: the launcher gives each service its own user
# (services.deploy.access), and docker compose or a user can set the same variables.
USERNAME_ENV = "HASTREAM_SASL_USERNAME"
PASSWORD_ENV = "HASTREAM_SASL_PASSWORD"
PROTOCOL_ENV = "HASTREAM_SECURITY_PROTOCOL"
SASL_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class Login:
    """A SASL/SCRAM login: who a client is to the broker, which its ACLs are granted to."""

    username: str
    password: str
    protocol: str = "SASL_PLAINTEXT"  # or SASL_SSL

    def env(self) -> dict[str, str]:
        """The environment variables that give a process this login."""
        return {USERNAME_ENV: self.username, PASSWORD_ENV: self.password, PROTOCOL_ENV: self.protocol}


def env_login(environ: Mapping[str, str] | None = None) -> Login | None:
    """The login ``$HASTREAM_SASL_USERNAME`` / ``_PASSWORD`` give, or None (a broker without SASL)."""
    env = os.environ if environ is None else environ
    username = env.get(USERNAME_ENV, "")
    if not username:
        return None
    return Login(username, env.get(PASSWORD_ENV, ""), env.get(PROTOCOL_ENV, "") or "SASL_PLAINTEXT")


def security_conf(login: Login | None) -> dict[str, str]:
    """The librdkafka settings of ``login`` (none without one: the client talks PLAINTEXT)."""
    if login is None:
        return {}
    return {
        "security.protocol": login.protocol,
        "sasl.mechanisms": SASL_MECHANISM,
        "sasl.username": login.username,
        "sasl.password": login.password,
    }


def java_client_conf(login: Login | None) -> dict[str, str]:
    """The same login as Java Kafka client properties (the Spark stage's reader and writer)."""
    if login is None:
        return {}
    user, password = (v.replace("\\", "\\\\").replace('"', '\\"') for v in (login.username, login.password))
    return {
        "security.protocol": login.protocol,
        "sasl.mechanism": SASL_MECHANISM,
        "sasl.jaas.config": (
            f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'
        ),
    }


def observed(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with hastream's log and error callbacks and the environment's login, for any client.

    Every confluent-kafka client hastream builds goes through here, so one place turns
    ``$HASTREAM_SASL_USERNAME`` into SASL settings; settings in ``conf`` win.
    """
    return {"logger": RDKAFKA_LOG, "error_cb": on_client_error, **security_conf(env_login()), **conf}


def _retriable(e: BaseException) -> bool:
    """Whether ``e`` is a transient broker error worth the same call again (a fatal one never is:
    the client that raised it can do nothing more)."""
    if not (isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError)):
        return False
    err: KafkaError = e.args[0]
    return not err.fatal() and (err.retriable() or err.code() in TRANSIENT)


def _log_retry(state: RetryCallState) -> None:
    """The first retry of a call is logged; later ones only at debug level (one line, not one per try)."""
    exc = state.outcome.exception() if state.outcome is not None else None
    level = logging.WARNING if state.attempt_number == 1 else logging.DEBUG
    log.log(level, "transient Kafka error, retrying %s for up to 60 s: %s", getattr(state.fn, "__name__", "call"), exc)


# Retry a call while a broker is starting, failing over or unreachable, for up to 60 s; a
# service that still fails then exits, and its supervisor (the launcher, compose) restarts it.
retry_transient = retry(
    retry=retry_if_exception(_retriable),
    wait=wait_exponential(multiplier=0.1, max=2),
    stop=stop_after_delay(60),
    before_sleep=_log_retry,
    reraise=True,
)


# How fast a client finds a partition's new leader after a broker fails (docs/dpc.md, "The delay
# budget"). A client that loses its connection to a leader asks for metadata again only once a
# second while the cluster still names the dead broker, and once more after the broker leaves
# the metadata; asking every 250 ms instead finds the new leader within 250-500 ms of its
# election. Requests to a hung (not dead) broker fail after 10 s and go to the new leader.
FAILOVER_CONF: dict[str, object] = {
    "topic.metadata.refresh.interval.ms": 250,
    "metadata.max.age.ms": 3000,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 250,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "socket.timeout.ms": 10000,
}
CONSUMER_FAILOVER_CONF: dict[str, object] = {**FAILOVER_CONF, "fetch.error.backoff.ms": 100}


class BatchConsumer:
    """A consumer with explicit partition assignment and manual offset commits.

    Each operator-partition service owns fixed partitions, so there is no group
    rebalancing; the group id only names where committed offsets are kept.
    """

    def __init__(self, bootstrap: str, group_id: str, trims_fail: bool = False, **overrides: object) -> None:
        """``trims_fail``: a position that is no longer in the log raises ``TrimmedError`` from
        ``poll_batch`` instead of moving to the log's start (a recovery that reads from an
        acknowledged or checkpointed position must not skip what was deleted)."""
        conf: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error" if trims_fail else "earliest",
            "fetch.wait.max.ms": 20,
            "queued.min.messages": 20000,
            # librdkafka's default (1 s) idles the fetcher whenever its queue is full, which a
            # fast consumer drains in well under a second.
            "fetch.queue.backoff.ms": 10,
            "enable.partition.eof": False,
            "allow.auto.create.topics": False,
            **CONSUMER_FAILOVER_CONF,
        }
        conf.update(overrides)
        self._c = Consumer(observed(conf))

    @retry_transient
    def assign(self, topics: Sequence[str], partition: int, from_committed: bool = True) -> None:
        """Read ``partition`` of each topic, from the committed offset if any, else the start."""
        tps = [TopicPartition(t, partition) for t in topics]
        if from_committed:
            committed = self._c.committed(tps, timeout=10)
            tps = [
                TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                for tp in committed
            ]
        else:
            tps = [TopicPartition(t, partition, OFFSET_BEGINNING) for t in topics]
        self._c.assign(tps)

    def assign_offsets(self, tps: Sequence[TopicPartition]) -> None:
        self._c.assign(list(tps))

    def positions(self) -> list[TopicPartition]:
        """Next offset to read per assigned partition: what to commit once a batch is done."""
        return [tp for tp in self._c.position(self._c.assignment()) if tp.offset >= 0]

    def poll_batch(self, max_messages: int = 1000, timeout: float = 0.05) -> list[Message]:
        """Up to ``max_messages`` messages; transport errors are logged and skipped.

        Returns what is already fetched at once; waits up to ``timeout`` only when nothing
        is, so a light load is not delayed by the full timeout per batch.
        """
        msgs = self._c.consume(max_messages, 0)
        if not msgs:
            first = self._c.poll(timeout)
            if first is None:
                return []
            msgs = [first] + self._c.consume(max_messages - 1, 0)
        bad = [m for m in msgs if m.error() is not None]
        if bad:
            for m in bad:
                err = m.error()
                if err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET:
                    # Only with auto.offset.reset=error: the position was trimmed away (``trims_fail``).
                    raise TrimmedError(
                        f"{m.topic()}[{m.partition()}]: the offset to read from is no longer in the log (it was "
                        f"trimmed or expired), so the records before the log's start are lost: {err.str()}"
                    )
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error: %s", err)
            msgs = [m for m in msgs if m.error() is None]
        return msgs

    @retry_transient
    def commit(self, offsets: Iterable[TopicPartition], asynchronous: bool = False) -> None:
        offs = list(offsets)
        if offs:
            if asynchronous:
                self._c.commit(offsets=offs, asynchronous=True)
            else:
                self._c.commit(offsets=offs, asynchronous=False)

    def close(self) -> None:
        self._c.close()

    @property
    def raw(self) -> Consumer:
        return self._c


class RawProducer(Protocol):
    """The one call made on a producer's own client (``BatchProducer.raw``), so tests can fake it."""

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        *,
        headers: RawHeaders = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    ) -> None: ...


class DataProducer(Protocol):
    """What a node's outputs, its scheme and its restart-image writer use of a ``BatchProducer``, so tests can fake it."""

    def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int = -1, headers: RawHeaders = None
    ) -> None: ...

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None: ...

    def flush(self, timeout: float = 30) -> None: ...

    @property
    def raw(self) -> RawProducer: ...


class BatchProducer:
    """An idempotent producer: batches by linger, never reorders or duplicates on retry."""

    def __init__(self, bootstrap: str, linger_ms: int = 5, **overrides: object) -> None:
        conf: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
            "compression.type": "lz4",
            "delivery.report.only.error": True,
            **FAILOVER_CONF,
        }
        conf.update(overrides)
        self._errors: list[str] = []
        # One delivery callback for every message (only failures are reported): none set per message.
        self._p = Producer(observed({**conf, "error_cb": self._on_error, "on_delivery": self.on_delivery}))

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._errors.append(str(err))
        on_client_error(err)

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        """Delivery callback: records failures for ``flush`` to raise."""
        if err is not None:
            self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int = -1,
        headers: RawHeaders = None,
    ) -> None:
        """Queue one message; waits for queue room instead of failing when full."""
        while True:
            try:
                self._p.produce(topic, value, key, partition=partition, headers=headers)
                return
            except BufferError:
                self._p.poll(0.05)

    def poll(self, timeout: float = 0) -> None:
        self._p.poll(timeout)

    def flush(self, timeout: float = 30) -> None:
        """Wait until every queued message is acknowledged; raise if any was not.

        Messages still queued after ``timeout`` are being retried by the client (a leader
        fail-over, say), so the wait goes on as a transient error; a delivery error is final.
        """
        self._await_queue(timeout)
        if self._errors:
            errs, self._errors = self._errors, []
            raise KafkaException(f"delivery failed: {errs[0]} (+{len(errs) - 1} more)")

    @retry_transient
    def _await_queue(self, timeout: float) -> None:
        remaining = self._p.flush(timeout)
        if remaining:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"{remaining} messages not delivered within {timeout}s")
            )

    @property
    def raw(self) -> Producer:
        return self._p


# Every consumer group hastream names starts so: on a SASL broker each service may describe
# them all (what a reader that never commits needs) and read (commit in) only its own.
GROUP_PREFIX = "hastream."


def group_id(role: str) -> str:
    """The consumer group of ``role`` (a node service's name, or a reader's role)."""
    return GROUP_PREFIX + role


def plain_consumer(bootstrap: str, role: str, unique: bool = False, **overrides: Any) -> Consumer:
    """A consumer with manual assignment and no commits, for readers outside the data path.

    ``role`` names its group (``hastream.<role>``); ``unique`` gives it a group of its own,
    for readers that must never share committed offsets.
    """
    group = f"{group_id(role)}.{uuid.uuid4().hex[:8]}" if unique else group_id(role)
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        **CONSUMER_FAILOVER_CONF,
    }
    conf.update(overrides)
    return Consumer(observed(conf))


def know_topics(consumer: Consumer, topics: Iterable[str]) -> None:
    """Have ``consumer`` fetch the metadata of topics it may be assigned later (the other replicas of
    its inputs): a first assignment of a topic it knows nothing of waits about 0.15 s for it,
    part of a replica switch's delay."""
    for topic in topics:
        try:
            consumer.list_topics(topic, timeout=5)
        except KafkaException as e:
            log.debug("no metadata for %s yet: %s", topic, e)
