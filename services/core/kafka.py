"""Every Kafka client hastream builds: the batched consumer and producer of the data path, and plain consumers.

One place sets the client configuration (logging through Python, no auto commit, no
auto-created topics), so every service, client and tool talks to Kafka the same way.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Callable, Iterable, Protocol, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from tenacity import RetryCallState, retry, retry_if_exception, stop_after_delay, wait_exponential

from services.core.tuples import RawHeaders

log = logging.getLogger(__name__)
# librdkafka's own log lines go through Python logging (not raw to stderr), so each
# program decides what to show: services log them, CLI commands show only errors.
RDKAFKA_LOG = logging.getLogger("hastream.librdkafka")

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


def _retriable(e: BaseException) -> bool:
    """Whether ``e`` is a transient broker error worth the same call again (a fatal one never is:
    the client that raised it can do nothing more)."""
    if not (isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError)):
        return False
    err: KafkaError = e.args[0]
    return not err.fatal() and (err.retriable() or err.code() in TRANSIENT)


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    log.warning("transient Kafka error, retrying %s: %s", getattr(state.fn, "__name__", "call"), exc)


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

    def __init__(self, bootstrap: str, group_id: str, **overrides: object) -> None:
        conf: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 20,
            "queued.min.messages": 20000,
            # librdkafka's default (1 s) idles the fetcher whenever its queue is full, which a
            # fast consumer drains in well under a second.
            "fetch.queue.backoff.ms": 10,
            "enable.partition.eof": False,
            "allow.auto.create.topics": False,
            "logger": RDKAFKA_LOG,
            **CONSUMER_FAILOVER_CONF,
        }
        conf.update(overrides)
        self._c = Consumer(conf)

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
            "logger": RDKAFKA_LOG,
            **FAILOVER_CONF,
        }
        conf.update(overrides)
        self._errors: list[str] = []
        self._p = Producer(conf, error_cb=self._on_error)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._errors.append(str(err))
        log.warning("producer error: %s", err)

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
                self._p.produce(topic, value, key, partition=partition, headers=headers, on_delivery=self.on_delivery)
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


def plain_consumer(bootstrap: str, role: str, unique: bool = False, **overrides: Any) -> Consumer:
    """A consumer with manual assignment and no commits, for readers outside the data path.

    ``role`` names its group (``hastream.<role>``); ``unique`` gives it a group of its own,
    for readers that must never share committed offsets.
    """
    group = f"hastream.{role}.{uuid.uuid4().hex[:8]}" if unique else f"hastream.{role}"
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "logger": RDKAFKA_LOG,
        **CONSUMER_FAILOVER_CONF,
    }
    conf.update(overrides)
    return Consumer(conf)
