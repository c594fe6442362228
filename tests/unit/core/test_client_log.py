"""librdkafka's reconnect chatter: counted, and one line per broker outage instead of one per attempt."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from confluent_kafka import KafkaError, Producer

from services.core import client_log as kafka
from services.core.client_log import BrokerWait, ClientLog
from services.core.kafka import observed

REFUSED = (
    "[thrd:127.0.0.1:{port}/bootstrap]: 127.0.0.1:{port}/bootstrap: Connect to ipv4#127.0.0.1:{port} failed: "
    "Connection refused (after 0ms in state CONNECT)"
)


class Lines(logging.Handler):
    """The messages a logger emitted."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def capture(name: str) -> tuple[logging.Logger, Lines]:
    logger = logging.getLogger(name)
    logger.propagate = False
    handler = Lines()
    logger.handlers = [handler]
    logger.setLevel(logging.DEBUG)
    return logger, handler


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(cond: object, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_thousand_refused_connections_make_one_line_and_the_return_another(request: pytest.FixtureRequest) -> None:
    wait_logger, waits = capture(f"test.wait.{request.node.name}")
    other_logger, others = capture(f"test.rdkafka.{request.node.name}")
    wait = BrokerWait(wait_logger, probe_s=0.05)
    client_log = ClientLog(other_logger, wait)
    port = closed_port()
    before = kafka.RDKAFKA_LOG_LINES["FAIL"]
    for _ in range(1000):
        client_log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED.format(port=port))
    coordinator = (
        f"[thrd:GroupCoordinator]: GroupCoordinator: Connect to ipv4#127.0.0.1:{port} failed: Connection refused"
    )
    client_log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-2", coordinator)
    assert waits.lines == [f"waiting for the Kafka broker at 127.0.0.1:{port} ... (Connection refused)"]
    assert kafka.RDKAFKA_LOG_LINES["FAIL"] - before == 1001
    assert wait.waiting() == [f"127.0.0.1:{port}"]

    with socket.socket() as server:  # the broker is back on its port
        server.bind(("127.0.0.1", port))
        server.listen()
        assert wait_for(lambda: len(waits.lines) == 2)
    assert waits.lines[1].startswith(f"the Kafka broker at 127.0.0.1:{port} accepts connections again")
    assert wait.waiting() == []
    assert others.lines == []


def test_other_lines_go_to_the_logger_and_a_lost_connection_alone_says_nothing(request: pytest.FixtureRequest) -> None:
    wait_logger, waits = capture(f"test.wait.{request.node.name}")
    other_logger, others = capture(f"test.rdkafka.{request.node.name}")
    client_log = ClientLog(other_logger, BrokerWait(wait_logger))
    client_log.log(logging.WARNING, "%s [%s] %s", "CONFWARN", "rdkafka#consumer-1", "[thrd:app]: a config warning")
    client_log.log(
        logging.INFO,
        "%s [%s] %s",
        "FAIL",
        "rdkafka#consumer-1",
        "[thrd:127.0.0.1:9/0]: 127.0.0.1:9/0: Disconnected (after 600000ms in state UP)",
    )
    assert others.lines == ["CONFWARN [rdkafka#consumer-1] [thrd:app]: a config warning"]
    assert waits.lines == []


def test_a_real_client_on_a_closed_port_says_one_line_and_counts_the_rest(request: pytest.FixtureRequest) -> None:
    wait_logger, waits = capture("hastream.kafka")
    port = closed_port()
    errors_before = kafka.RDKAFKA_ERRORS["_TRANSPORT"]
    p = Producer(observed({"bootstrap.servers": f"127.0.0.1:{port}", "reconnect.backoff.max.ms": 100}))
    p.produce("nowhere", b"x")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        p.poll(0.1)
    mine = [line for line in waits.lines if f":{port}" in line]
    assert mine == [f"waiting for the Kafka broker at 127.0.0.1:{port} ... (Connection refused)"]
    assert kafka.RDKAFKA_ERRORS["_TRANSPORT"] > errors_before
    assert kafka.RDKAFKA_ERRORS[KafkaError(KafkaError._ALL_BROKERS_DOWN).name()] >= 1
