"""Which Kafka errors are transient (retried with backoff) and which are real, and a flush that outlasts its wait."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from services.core import admin, kafka
from services.core.kafka import BatchProducer
from services.core.retry import _retriable


def exc(code: int, **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, "test", **flags))


TRANSIENT_CODES = [
    KafkaError._DESTROY_BROKER,  # a broker connection torn down mid-request (broker killed)
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.BROKER_NOT_AVAILABLE,
]


@pytest.mark.parametrize("code", TRANSIENT_CODES)
def test_broker_failure_errors_are_transient(code: int) -> None:
    assert _retriable(exc(code))


@pytest.mark.parametrize(
    "e",
    [
        exc(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        exc(KafkaError.INVALID_REPLICATION_FACTOR),
        exc(KafkaError._INVALID_ARG),
        exc(KafkaError._TRANSPORT, fatal=True),  # fatal wins over the code: the client is unusable
        KafkaException("a message, not a KafkaError"),
        ValueError("not Kafka"),
    ],
)
def test_real_errors_are_not_retried(e: BaseException) -> None:
    assert not _retriable(e)


def test_an_error_the_client_marks_retriable_is_transient() -> None:
    assert _retriable(exc(KafkaError.UNKNOWN, retriable=True))


class SlowProducer:
    """Acknowledges its queue only on the second flush, as during a leader fail-over."""

    def __init__(self) -> None:
        self.calls = 0

    def flush(self, timeout: float) -> int:
        self.calls += 1
        return 3 if self.calls == 1 else 0


def test_flush_keeps_waiting_while_messages_are_in_flight() -> None:
    p = BatchProducer("127.0.0.1:1")
    slow = SlowProducer()
    p._p = slow  # type: ignore[assignment]
    p.flush(timeout=0.01)
    assert slow.calls == 2


class FlakyAdmin:
    """An admin client whose first metadata request meets a broker going down."""

    def __init__(self) -> None:
        self.calls = 0

    def list_topics(self, timeout: float) -> object:
        self.calls += 1
        if self.calls == 1:
            raise exc(KafkaError._DESTROY_BROKER)
        return type("Md", (), {"topics": {}, "brokers": {1: None, 2: None}})()


def test_admin_calls_retry_transient_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    flaky = FlakyAdmin()
    monkeypatch.setattr(admin, "admin_client", lambda bootstrap: flaky)
    admin.delete_topics("127.0.0.1:1", ["gone"])
    assert flaky.calls == 2


def test_every_hastream_reader_reads_only_committed_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both kinds of hastream consumer say ``read_committed`` themselves: an egress's open or aborted
    transactions are never read, whatever librdkafka's default is."""
    confs: list[dict] = []

    class Recording:
        def __init__(self, conf: dict) -> None:
            confs.append(conf)

    monkeypatch.setattr(kafka, "Consumer", Recording)
    kafka.plain_consumer("127.0.0.1:1", "view")
    kafka.BatchConsumer("127.0.0.1:1", "hastream.node")
    assert [c["isolation.level"] for c in confs] == ["read_committed", "read_committed"]


class StartingCluster:
    """A cluster whose first metadata answer lists no broker yet, as a just-started broker answers
    before it has registered; the next lists one."""

    def __init__(self) -> None:
        self.calls = 0

    def list_topics(self, timeout: float) -> object:
        self.calls += 1
        return type("Md", (), {"topics": {}, "brokers": {} if self.calls == 1 else {0: None}})()


def test_a_cluster_that_lists_no_broker_yet_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replication factor is taken from the broker count: a count of 0 (the broker not registered
    yet) would make every topic creation fail with 'Replication factor must be larger than 0'."""
    cluster = StartingCluster()
    monkeypatch.setattr(admin, "admin_client", lambda bootstrap: cluster)
    assert admin.broker_count("127.0.0.1:1") == 1
    assert cluster.calls == 2
