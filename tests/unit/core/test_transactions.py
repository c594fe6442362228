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
        def call(*args: object) -> None:
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
