"""Fenced writers: each incarnation of a node replica writes with its own epoch, and a replaced copy stops.

A replica paused (SIGSTOP, a stuck host) past ``failure_timeout`` may be replaced by a
second copy; when the first resumes, both would write ``<spec>.<stream>.r<k>``. So at start an
incarnation claims an epoch: it sends a claim heartbeat and takes its offset + 1, higher
than any earlier incarnation's since Kafka hands out offsets in one order. It waits a
moment (a copy still running sees the claim and stops), writes an EPOCH tuple to each of
its output partitions and only then reads its logs to restart. Every tuple it writes
carries the epoch (the ``epoch`` field of ``ht``), and so do its heartbeats.

Readers drop a lower epoch after a higher one (``services.core.tuples.EpochGate``). The
replaced copy stops itself: before each flush it checks whether the monitor has seen a
higher epoch of its replica and, if it stood still longer than ``failure_timeout``, first
reads every heartbeat sent meanwhile. It raises ``FencedError`` and exits, having written
at most what it had in flight and one flush after its successor's EPOCH.
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from services.control.messages import CLAIM_EPOCH, Heartbeat, now_ms
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.core.client_log import RDKAFKA_LOG
from services.core.errors import FencedError
from services.core.kafka import plain_consumer
from services.core.login import env_login, security_conf
from services.core.retry import retry_transient

log = logging.getLogger(__name__)

NOTICE_S = 0.3  # how long a new incarnation gives a running older copy to see its claim and stop


CLAIM_S = 30.0  # how long one claim waits for its delivery before it counts as failed


class EpochClaimer:
    """Claims epochs on the heartbeat topic with one kept producer. Its calls block (the claim must be
    on the broker before its epoch is used), so a caller with an event loop runs them in threads:
    the producer is thread-safe and each claim waits only for its own delivery, so the claims of
    several partitions run side by side."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    def producer(self) -> Producer:
        with self._lock:
            if self._producer is None:
                conf = {"bootstrap.servers": self.bootstrap, "acks": "all", "logger": RDKAFKA_LOG}
                self._producer = Producer({**conf, **security_conf(env_login())})
            return self._producer

    @retry_transient
    def claim(self, node: str, partition: int, replica: int) -> int:
        """A new epoch for (node, partition, replica): one past the offset of the claim it sends."""
        p = self.producer()
        done = threading.Event()
        got: list[int] = []
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                got.append(msg.offset() or 0)
            else:
                errors.append(err)
            done.set()

        hb = Heartbeat(node, partition, replica, NodeState.RECOVERING, now_ms(), CLAIM_EPOCH)
        p.produce(self.topic, hb.encode(), node.encode(), 0, on_delivery=delivered)
        deadline = time.monotonic() + CLAIM_S
        while not done.is_set() and time.monotonic() < deadline:
            p.poll(0.05)  # serves every thread's deliveries; each claim waits for its own
        if not got:
            raise KafkaException(
                errors[0] if errors else KafkaError(KafkaError._TIMED_OUT, "epoch claim not delivered")
            )
        return got[0] + 1

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)


def claim_epoch(bootstrap: str, topic: str, node: str, partition: int, replica: int) -> int:
    """A new epoch for this incarnation: one past the offset of the claim it sends to the heartbeat topic."""
    claimer = EpochClaimer(bootstrap, topic)
    try:
        return claimer.claim(node, partition, replica)
    finally:
        claimer.close()


class Fence:
    """This incarnation's epoch, and the check that no newer incarnation of its replica has started."""

    def __init__(
        self,
        bootstrap: str,
        monitor: ReplicaMonitor,
        topic: str,
        node: str,
        partition: int,
        replica: int,
        epoch: int,
        stall_s: float,
        replicas: tuple[int, ...] | None = None,
    ) -> None:
        """``replicas``: whose epochs fence this writer; its own replica's (None), or every replica of
        the partition when the replicas take turns writing one log (``Scheme.one_log``)."""
        self.bootstrap, self.monitor, self.topic = bootstrap, monitor, topic
        self.node, self.partition, self.replica = node, partition, replica
        self.epoch, self.stall_s = epoch, stall_s
        self.replicas = replicas if replicas is not None else (replica,)
        self.checked = time.monotonic()
        self._lock = threading.Lock()  # the loop checks before each flush, the image writer's thread before each send

    def check(self, reread: bool = False) -> None:
        """Raise ``FencedError`` if a newer incarnation has claimed the replica; called before each flush.
        ``reread``: read every heartbeat sent until now first, however recent the last check."""
        with self._lock:
            self._check(reread)

    def _check(self, reread: bool) -> None:
        now = time.monotonic()
        if reread or now - self.checked > self.stall_s:  # long enough to have been replaced meanwhile
            self.monitor.read_up_to(_end(self.bootstrap, self.topic))
        self.checked = now
        newer = max(self.monitor.epoch(self.node, self.partition, r) for r in self.replicas)
        if newer > self.epoch:
            raise FencedError(
                f"{self.node} p{self.partition} r{self.replica} was replaced by a newer incarnation or replica "
                f"(epoch {newer} > {self.epoch}, after this process stood still): it stops writing and exits"
            )


@retry_transient
def _end(bootstrap: str, topic: str) -> int:
    """The heartbeat topic's end offset now."""
    c = plain_consumer(bootstrap, "fence")
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()
