"""How the transactional producer answers librdkafka's transaction errors, over a fake client that
raises them as confluent-kafka does (a ``KafkaException`` wrapping a ``KafkaError`` with the flags
its docs name: retriable, txn_requires_abort, fatal): a transient error is retried, an error that
needs an abort aborts, and a fencing is a ``FencedError``."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from services.core.errors import FencedError
from services.core.transactions import TransactionAborted, TransactionalProducer


class FakeClient:
    """The transactional calls of a ``confluent_kafka.Producer``; each raises the next error queued for it."""

    def __init__(self, **errors: list[KafkaError]) -> None:
        self.errors = errors
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        def call(*args: object, **kwargs: object) -> None:
            self.calls.append(name)
            queued = self.errors.get(name, [])
            if queued:
                raise KafkaException(queued.pop(0))

        return call


def _producer(client: FakeClient) -> TransactionalProducer:
    p = TransactionalProducer("unused:9092", "s.out.egress.p0")
    p._batch._p = client  # type: ignore[assignment]
    return p


def test_a_transient_error_in_a_commit_is_retried_and_the_commit_goes_through() -> None:
    client = FakeClient(commit_transaction=[KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True)])
    p = _producer(client)
    p.begin()
    p.commit()
    assert client.calls == ["begin_transaction", "commit_transaction", "commit_transaction"]
    assert not p.open


def test_an_error_that_needs_an_abort_aborts_and_says_so() -> None:
    err = KafkaError(KafkaError._STATE, "partition gone", txn_requires_abort=True)
    client = FakeClient(commit_transaction=[err])
    p = _producer(client)
    p.begin()
    with pytest.raises(TransactionAborted, match="s.out.egress.p0: commit_transaction failed and was aborted"):
        p.commit()
    assert client.calls == ["begin_transaction", "commit_transaction", "abort_transaction"]
    assert not p.open


def test_an_error_that_needs_an_abort_whose_abort_finds_the_writer_fenced_stops_it() -> None:
    """A commit that fails while a newer writer takes the id over: librdkafka asks for an abort, and the
    abort fails as fenced. That is a fencing (the egress steps down), not an unknown error (it exited)."""
    err = KafkaError(KafkaError._STATE, "Failed to end transaction: Unknown", txn_requires_abort=True)
    fenced = KafkaError(KafkaError._FENCED, "This instance has been fenced by a newer instance", fatal=True)
    client = FakeClient(commit_transaction=[err], abort_transaction=[fenced])
    p = _producer(client)
    p.begin()
    with pytest.raises(FencedError, match="taken over by a newer writer"):
        p.commit()
    assert client.calls == ["begin_transaction", "commit_transaction", "abort_transaction"]
    assert not p.open


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH])
def test_a_fenced_writer_stops(code: int) -> None:
    client = FakeClient(commit_transaction=[KafkaError(code, "fenced", fatal=True)])
    p = _producer(client)
    p.begin()
    with pytest.raises(FencedError, match="taken over by a newer writer"):
        p.commit()
    assert client.calls == ["begin_transaction", "commit_transaction"]  # not retried, not aborted


def test_any_other_error_is_raised_as_it_is() -> None:
    """A bug (a call out of order) is not a fencing: it surfaces unchanged."""
    client = FakeClient(begin_transaction=[KafkaError(KafkaError._STATE, "no init", fatal=False)])
    p = _producer(client)
    with pytest.raises(KafkaException, match="no init"):
        p.begin()
    assert not p.open


def test_closing_aborts_an_open_transaction() -> None:
    client = FakeClient()
    p = _producer(client)
    p.begin()
    p.close()
    assert client.calls == ["begin_transaction", "abort_transaction"]


class FatalOnSend(FakeClient):
    """A fenced client as librdkafka has it: its produce fails with ``_FATAL``, and the fatal error itself
    (the fencing, or another) reaches the error callback at the next poll."""

    def __init__(self, cause: KafkaError) -> None:
        super().__init__(produce=[KafkaError(KafkaError._FATAL, "Local: Fatal error", fatal=True)])
        self.cause = cause
        self.producer: TransactionalProducer | None = None

    def poll(self, timeout: float) -> int:
        self.calls.append("poll")
        assert self.producer is not None
        self.producer._batch._on_error(self.cause)
        return 0


def _fatal_on_send(cause: KafkaError) -> tuple[TransactionalProducer, FatalOnSend]:
    client = FatalOnSend(cause)
    p = _producer(client)
    client.producer = p
    p.begin()
    return p, client


def test_a_send_that_fails_for_a_fencing_says_the_writer_was_taken_over() -> None:
    """A zombie woken after its successor's init: its first send fails as the client's fatal error."""
    p, client = _fatal_on_send(KafkaError(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True))
    with pytest.raises(FencedError, match="taken over by a newer writer .*fenced by newer instance"):
        p.send("t", b"v")
    assert client.calls == ["begin_transaction", "produce", "poll"]


def test_a_send_that_fails_for_another_fatal_error_is_raised_as_it_is() -> None:
    p, _ = _fatal_on_send(KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "denied", fatal=True))
    with pytest.raises(KafkaException, match="Fatal error"):
        p.send("t", b"v")
