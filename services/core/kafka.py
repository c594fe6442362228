"""Every Kafka client hastream builds: the batched consumer and producer of the data path, and plain consumers.

One place sets the client configuration (logging through Python, no auto commit, no
auto-created topics), so every service, client and tool talks to Kafka the same way.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Callable, Iterable, Protocol, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from services.core.client_log import RDKAFKA_LOG, on_client_error
from services.core.errors import TrimmedError
from services.core.login import env_login, security_conf
from services.core.retry import retry_transient
from services.core.tuples import RawHeaders

log = logging.getLogger(__name__)


def observed(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with hastream's log and error callbacks and the environment's login, for any client.

    Every confluent-kafka client hastream builds goes through here, so one place turns
    ``$HASTREAM_SASL_USERNAME`` into SASL settings; settings in ``conf`` win.
    """
    return {"logger": RDKAFKA_LOG, "error_cb": on_client_error, **security_conf(env_login()), **conf}


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
# A reader that keeps up with its input: librdkafka's default (1 s) idles the fetcher whenever its queue
# is full, which a fast consumer drains in well under a second.
FAST_FETCH: dict[str, object] = {"queued.min.messages": 20000, "fetch.queue.backoff.ms": 10}
# Every hastream reader takes a transaction's records only once it commits, and never an aborted one's
# (an egress writes so, ``services.core.transactions``). It is librdkafka's default; said here so that
# no reader differs, and so that a change of that default changes nothing.
READ_COMMITTED: dict[str, object] = {"isolation.level": "read_committed"}


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
            **FAST_FETCH,
            "enable.partition.eof": False,
            "allow.auto.create.topics": False,
            **CONSUMER_FAILOVER_CONF,
            **READ_COMMITTED,
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

    def hold(self, on: bool) -> None:
        """Stop fetching from every assigned partition (``on``), or go on; positions stay where they are."""
        parts = self._c.assignment()
        if parts:
            (self._c.pause if on else self._c.resume)(parts)

    def positions(self) -> list[TopicPartition]:
        """Next offset to read per assigned partition: what to commit once a batch is done."""
        return [tp for tp in self._c.position(self._c.assignment()) if tp.offset >= 0]

    def poll_batch(self, max_messages: int = 1000, timeout: float = 0.05) -> list[Message]:
        """Up to ``max_messages`` messages; transport errors are logged and skipped.

        Returns what is already fetched at once; waits up to ``timeout`` only when nothing
        is, so a light load is not delayed by the full timeout per batch.
        """
        msgs = consume_ready(self._c, max_messages, timeout)
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
        self.fatal: KafkaError | None = None  # the client's first fatal error: it can send no more
        # One delivery callback for every message (only failures are reported): none set per message.
        self._p = Producer(observed({**conf, "error_cb": self._on_error, "on_delivery": self.on_delivery}))

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._errors.append(str(err))
            self.fatal = self.fatal or err
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


def consume_ready(c: Consumer, max_messages: int, timeout: float) -> list[Message]:
    """Up to ``max_messages`` messages: what is already fetched, at once; only when nothing is, the first
    to come within ``timeout`` and what came with it. (``consume(n, timeout)`` waits for ``n`` messages
    or the whole timeout: under a light load each message would wait up to the timeout.)"""
    msgs = c.consume(max_messages, 0)
    if msgs:
        return msgs
    first = c.poll(timeout)
    return [] if first is None else [first, *c.consume(max_messages - 1, 0)]


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
        **READ_COMMITTED,
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
