"""What hastream does with the Kafka clients' own reports: counted, and one line per broker outage or refused login.

librdkafka reports every failed reconnect attempt, and aiokafka (under the coordinator) does
the same; a user needs to know once what a program waits for, and when the wait is over.
Every client hastream builds logs through ``RDKAFKA_LOG`` and reports errors to
``on_client_error``; the counts are what the metrics module exports.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections import Counter

from confluent_kafka import KafkaError

from services.core.login import env_login

# The Kafka clients' logger, by the name it had when the clients and their reports were one
# module: a program that quiets the clients' warnings (bench.broker_failover) quiets these too.
log = logging.getLogger("services.core.kafka")

# Where the one line per broker outage goes ("waiting for the Kafka broker at ..."): the
# services' logs, and a CLI command's stderr.
WAIT_LOG = logging.getLogger("hastream.kafka")

# librdkafka's log lines by facility and its errors by name, in this process: counted here
# instead of printed, for a metrics module to export.
RDKAFKA_LOG_LINES: Counter[str] = Counter()
RDKAFKA_ERRORS: Counter[str] = Counter()


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
