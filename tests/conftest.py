"""Shared fixtures: one real Kafka broker for the whole run, a fresh 3-broker cluster for fault tests.

Where the broker comes from (first match wins):

* ``HASTREAM_BOOTSTRAP=host:port`` - an already running broker (fastest for repeated local runs,
  e.g. one started with ``hastream kafka start``);
* ``HASTREAM_TEST_KAFKA=testcontainers`` - a Docker container via testcontainers (only where a
  Docker engine exists; image from ``HASTREAM_TEST_KAFKA_IMAGE``);
* otherwise an embedded 1-broker KRaft cluster from the Maven jars, in a temp dir.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from infra.kafka.cluster import KafkaCluster
from tests.integration.helpers import three_brokers


@dataclass(frozen=True)
class ExternalKafka:
    """A broker this test run did not start and must not stop."""

    bootstrap: str


def _testcontainers_kafka() -> Any:
    """Import lazily: testcontainers pulls in the Docker SDK, which most runs never need."""
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # older testcontainers layout
        from testcontainers.kafka import KafkaContainer
    image = os.environ.get("HASTREAM_TEST_KAFKA_IMAGE", "confluentinc/cp-kafka:7.6.0")
    return KafkaContainer(image).with_kraft()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The shared broker for the whole test run; use ``kafka.bootstrap`` and unique topic names."""
    bootstrap = os.environ.get("HASTREAM_BOOTSTRAP")
    if bootstrap:
        yield ExternalKafka(bootstrap)
        return
    if os.environ.get("HASTREAM_TEST_KAFKA") == "testcontainers":
        container = _testcontainers_kafka()
        container.start()
        try:
            yield ExternalKafka(container.get_bootstrap_server())
        finally:
            container.stop()
        return
    cluster = KafkaCluster(brokers=1, data_dir=tmp_path_factory.mktemp("kafka"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


# Failure detection for 3 brokers that share 2 cores with a replicated chain (its services, the
# coordinator, the test): with ``FAILOVER_PROPS`` (heartbeats every 100 ms, a 1 s session) the
# controller's event queue fell behind ("controller event queue overloaded. Timed out heartbeat
# from broker N"), live brokers were fenced and nodes stood still for half a minute. docs/dpc.md
# ("The delay budget across a broker failure") gives the F and X these settings need.
CROWDED = {"broker.heartbeat.interval.ms": 250, "broker.session.timeout.ms": 2500}


@pytest.fixture(scope="module")
def crowded3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A fresh 3-broker cluster as ``kafka3``, its failure detection sized for a chain on the same 2 cores."""
    yield from three_brokers(tmp_path_factory, "crowded3", CROWDED)


@pytest.fixture(scope="module")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A fresh 3-broker cluster (3-voter quorum, RF 3, min ISR 2) that tests may kill brokers in.

    Module scoped because fault tests leave brokers dead or restarted; always embedded because
    the tests need to SIGKILL and restart individual broker processes.
    """
    yield from three_brokers(tmp_path_factory, "kafka3")


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[..., str]:
    """Factory of unique, legal topic names, so tests on the shared broker never see each other's data.

    ``topic_name()`` -> ``"test_round_trip-1f3a9c0b2d"``; ``topic_name("orders")`` -> ``"orders-77e0c2a4b1"``.
    """

    def make(prefix: str | None = None) -> str:
        base = prefix if prefix is not None else request.node.name
        base = re.sub(r"[^a-zA-Z0-9._-]+", "-", base).strip("-.")[:200] or "topic"
        return f"{base}-{uuid.uuid4().hex[:10]}"

    return make


from tests.dpc_chain import failure_free  # noqa: E402,F401  (the DPC fault tests' shared reference run)
