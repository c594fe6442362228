"""The transactional write path: a batch of records and its read position are committed together, or not at all.

A writer with a fixed ``transactional.id`` (one per written partition: an egress partition,
CEC's atomic batches) gets exactly-once output for any ``read_committed`` consumer, as Kafka
Streams' EOS v2 does:

- ``init()`` registers the id with the broker's transaction coordinator, bumps its producer
  epoch (so every earlier incarnation with the same id is fenced: its next send or commit
  fails) and aborts whatever transaction that incarnation left open;
- ``begin()`` .. ``commit()`` make one batch visible at once; ``abort()`` drops it;
- a fenced producer raises ``FencedError`` (the process stops writing and exits, as a
  replaced node replica does), an error that needs an abort aborts and raises
  ``TransactionAborted`` (the caller goes back to its last committed position), and a
  broker's transient error is retried.

Consumers see a transaction's records only after its commit (``isolation.level =
read_committed``: ``READ_COMMITTED``, which every hastream reader sets, ``services.core.kafka``).
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from services.core.errors import FencedError, HastreamError
from services.core.kafka import BatchProducer, RawProducer
from services.core.retry import retry_transient
from services.core.tuples import RawHeaders

# How long the broker lets a transaction stay open before it aborts it itself: a writer that
# died mid-transaction (and whose successor has not called ``init()``) holds up read_committed
# consumers of its partitions at most this long.
TRANSACTION_TIMEOUT_MS = 10_000

# Broker and client codes that say a newer producer with the same transactional.id has started.
FENCED_CODES = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
}


class TransactionAborted(HastreamError, RuntimeError):
    """A transaction could not commit and was aborted: none of its records will be read."""


def _error(e: KafkaException) -> KafkaError | None:
    return e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None


class TransactionalProducer:
    """A ``BatchProducer`` whose sends go in transactions under ``transactional_id``."""

    def __init__(self, bootstrap: str, transactional_id: str, linger_ms: int = 5, **overrides: object) -> None:
        self.transactional_id = transactional_id
        conf: dict[str, Any] = {
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            **overrides,
        }
        self._batch = BatchProducer(bootstrap, linger_ms, **conf)
        self.open = False  # a transaction is begun and not yet committed or aborted
        self.begun_at = 0.0  # when the open one was begun (monotonic s)

    def init(self, timeout: float = 30) -> None:
        """Take the id over: earlier producers with it are fenced, their open transaction aborted."""
        self._call("init_transactions", timeout)

    def begin(self) -> None:
        self._call("begin_transaction")
        self.open = True
        self.begun_at = time.monotonic()

    def ensure_begun(self) -> None:
        """Begin a transaction unless one is open: the writer of atomic batches sends into the open one."""
        if not self.open:
            self.begin()

    def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int = -1, headers: RawHeaders = None
    ) -> None:
        """Queue one record in the open transaction."""
        try:
            self._batch.send(topic, value, key, partition, headers)
        except KafkaException as e:  # a fenced producer's sends fail as librdkafka's fatal error
            self._raise_for("send", e)
            raise

    def commit(self, timeout: float = 30) -> None:
        """Make every record sent since ``begin()`` visible at once (it flushes them first)."""
        try:
            self._call("commit_transaction", timeout)
        finally:
            self.open = False

    def abort(self, timeout: float = 30) -> None:
        """Drop every record sent since ``begin()``."""
        try:
            self._call("abort_transaction", timeout)
        finally:
            self.open = False

    def poll(self, timeout: float = 0) -> None:
        self._batch.poll(timeout)

    # -- as a ``DataProducer`` (``services.node.outputs``): each flush commits one atomic batch --------
    def flush(self, timeout: float = 30) -> None:
        """Commit what was sent since the last flush: all of it becomes readable at once."""
        if self.open:
            self.commit(timeout)

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        self._batch.on_delivery(err, msg)

    @property
    def raw(self) -> RawProducer:
        return self._batch.raw

    def close(self, timeout: float = 5) -> None:
        """Abort an open transaction (its records are never read) and let go of the client."""
        if self.open:
            try:
                self.abort(timeout)
            except (FencedError, TransactionAborted, KafkaException):
                pass  # a fenced or broken producer's transaction is aborted by its successor or the broker

    def _call(self, name: str, *args: object) -> None:
        try:
            self._retrying(name, *args)
        except KafkaException as e:
            self._raise_for(name, e)
            raise

    def _raise_for(self, name: str, e: KafkaException) -> None:
        """``TransactionAborted`` for an error that needs an abort (aborted first), ``FencedError`` for a
        fencing: the call's own error, or the client's fatal error a failed call stands for (``_FATAL``,
        told by the error callback, served here first). Else nothing: the caller raises ``e``."""
        err = _error(e)
        if err is None:
            return
        if err.txn_requires_abort():
            self._abort_after(name, err, e)
        self._raise_if_fenced(err, e)

    def _abort_after(self, name: str, err: KafkaError, e: KafkaException) -> None:
        """Abort the transaction ``name`` failed in; an abort that finds the writer fenced (a newer one took
        the id over meanwhile) is a ``FencedError``."""
        try:
            self._batch.raw.abort_transaction(30)
        except KafkaException as abort_failed:
            cause = _error(abort_failed)
            if cause is not None:
                self._raise_if_fenced(cause, abort_failed)
            raise
        finally:
            self.open = False
        raise TransactionAborted(f"{self.transactional_id}: {name} failed and was aborted: {err.str()}") from e

    def _raise_if_fenced(self, err: KafkaError, e: KafkaException) -> None:
        if err.code() == KafkaError._FATAL and self._batch.fatal is None:
            self._batch.poll(0)
        cause = self._batch.fatal if err.code() == KafkaError._FATAL and self._batch.fatal is not None else err
        if cause.code() in FENCED_CODES:
            raise FencedError(
                f"transactional id {self.transactional_id} was taken over by a newer writer ({cause.str()}): "
                "this one stops writing"
            ) from e

    @retry_transient
    def _retrying(self, name: str, *args: object) -> None:
        getattr(self._batch.raw, name)(*args)
