"""A client's view of a stream under DPC: the best replica, stable results, tentative ones, corrections.

A node's output exists once per replica (``<spec>.<stream>.r<k>``) and may hold TENTATIVE tuples
that a later UNDO voids and stable corrections replace. A client that wants the stream's
eventual result must follow one replica at a time, switch when it fails (continuing in
the other replica's log right after its last stable tuple), drop stable duplicates by id
and apply UNDOs. ``StreamView`` does that on Kafka; ``PartitionView``
(``services.client.partition``, with the contract) is the Kafka-free core that applies one
partition's messages, so the contract is testable without a broker.

Switching follows the paper's rules as node input ports do (``services.dpc.switching``): to a
stable replica after the last stable id, voiding the tentative tuples held; to a replica in
a failure keeping them, and taking only tentative tuples past their t_max;
away from a reconciling replica by reading its corrections and, meanwhile, a fresh
replica's new tentative tuples, until the corrected stream's REC_DONE.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterator, Sequence

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, Message, TopicPartition

from services.client.partition import PartitionView, ViewEvent
from services.client.reader import follow_polls
from services.control.monitor import ReplicaMonitor
from services.control.replicas import choose_replica
from services.control.states import NodeState
from services.core.codec import codec_for
from services.core.errors import HeaderError
from services.core.kafka import FAST_FETCH, consume_ready, know_topics, plain_consumer
from services.core.tuples import (
    REC_DONE,
    UNDO,
)
from services.dpc.switching import Move, ReplicaReader
from services.spec import Spec

log = logging.getLogger(__name__)


class StreamView:
    """Reads a stream following the best replica per partition, applying the DPC contract.

    For a node output with several replicas, a ``ReplicaMonitor`` (given, or started on the
    spec's heartbeat topic) tells each replica's state; ``choose_replica`` picks the one to
    read and a switch continues in the new replica's topic right after the last stable id.
    A source stream (one topic) is read as is. ``poll()`` returns ``ViewEvent``s in arrival
    order (only "stable" ones with ``stable_only``). ``partitions``: only those (an egress partition's
    primary); None: every partition.
    """

    def __init__(
        self,
        spec: Spec,
        stream: str,
        bootstrap: str,
        stable_only: bool = False,
        from_beginning: bool = True,
        monitor: ReplicaMonitor | None = None,
        keep_stable: bool = True,
        startup_wait: float | None = None,
        check_interval: float = 0.05,
        partitions: Sequence[int] | None = None,
    ) -> None:
        topics = spec.readable_topics(stream)
        self.spec, self.stream, self.bootstrap = spec, stream, bootstrap
        self.topics = topics
        self.stable_only, self.from_beginning = stable_only, from_beginning
        self.partitions = spec.streams[stream].partitions
        producer = spec.node_producing(stream)
        self.node = producer.name if producer is not None else None
        decode = codec_for(spec.streams[stream].schema).decode
        self.views = [PartitionView(p, decode, keep_stable, tentative=not stable_only) for p in range(self.partitions)]
        self.switches: list[tuple[int, int, int, int]] = []  # (partition, from replica, to replica, offset)
        self.bad = 0  # messages with missing or malformed headers
        self.check_interval = check_interval
        self._next_check = 0.0
        self._pending: list[ViewEvent] = []  # events made by a switch, returned by the next poll
        self.monitor, self._own_monitor = monitor, False
        if len(topics) > 1 and monitor is None:
            try:
                self.monitor = ReplicaMonitor(bootstrap, spec.heartbeat_topic, spec.dpc.failure_timeout / 1000.0)
                self._own_monitor = True
            except KafkaException as e:  # no heartbeat topic: read replica 0 only
                log.warning("no replica monitor (%s): reading replica 0 of '%s' only", e, stream)
        if self.monitor is not None and len(topics) > 1:
            wait = startup_wait if startup_wait is not None else 0.3 + 3 * spec.dpc.heartbeat_interval / 1000.0
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and not any(
                st.node == self.node and st.seen is not None for st in self.monitor.snapshot()
            ):
                time.sleep(0.02)
        owned = range(self.partitions) if partitions is None else partitions
        self.readers = {p: ReplicaReader(list(topics), p, self.node) for p in owned}
        for r in self.readers.values():  # the monitor has had its start-up wait
            r.replica = self.views[r.partition].replica = self._choose(r.partition, None)
        self.consumer = plain_consumer(bootstrap, "view", unique=True, **{"fetch.wait.max.ms": 50, **FAST_FETCH})
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        self.consumer.assign([TopicPartition(r.topic, r.partition, start) for r in self.readers.values()])
        # Rule 4's second replica is read apart: in one queue its new tuples would wait behind corrections.
        self.fresh_consumer = self.consumer
        if len(topics) > 1:
            self.fresh_consumer = plain_consumer(
                bootstrap, "view", unique=True, **{"fetch.wait.max.ms": 50, **FAST_FETCH}
            )
        others = set(topics) - {r.topic for r in self.readers.values()}
        know_topics(self.consumer, others)
        if self.fresh_consumer is not self.consumer:
            know_topics(self.fresh_consumer, others)

    @property
    def current(self) -> list[int]:
        """The replica each partition read is read from."""
        return [r.replica for r in self.readers.values()]

    # -- replica choice -------------------------------------------------------
    def states(self, partition: int) -> list[NodeState]:
        """Each replica's state for ``partition`` (FAILED if silent or never seen)."""
        return self.readers[partition].states(self.monitor)

    def _choose(self, partition: int, current: int | None) -> int:
        if len(self.topics) == 1:
            return 0
        return choose_replica(self.states(partition), current)

    def check_replicas(self) -> None:
        """Apply the switching rules to every partition (called by ``poll``)."""
        if len(self.topics) == 1 or self.monitor is None:
            return
        for r in self.readers.values():
            v = self.views[r.partition]
            if r.gap is not None:
                continue  # ``poll`` reads the missing ids again
            r.last_stable, r.tmax = v.last_stable, v.tmax
            step = r.plan(self.monitor, self.bootstrap, v.fresh_skip)
            if step is not None:
                self._follow(r.partition, *step)

    def _follow(self, partition: int, move: Move, replica: int, seek: tuple[int, int] | None = None) -> None:
        v, reader = self.views[partition], self.readers[partition]
        old = reader.replica
        if move is Move.FRESH:
            offset = reader.start_fresh(self.fresh_consumer, self.bootstrap, replica, v.fresh_skip, seek)
            v.start_fresh(replica, reader.fresh_gate)
        elif move is Move.CORRECT:
            offset = reader.correct(self.consumer, self.fresh_consumer, replica, seek or (0, 0))
            v.correct(replica, reader.gate, reader.fresh_gate)
        elif move is Move.PROMOTE:
            offset = reader.promote_fresh(self.consumer)
            v.promote_fresh()
        elif move is Move.END_FRESH:
            reader.end_fresh()
            v.end_fresh(self._pending)
            return
        else:
            self.switch(partition, replica, keep=move is Move.TENTATIVE, seek=seek, move=move)
            return
        self.switches.append((partition, old, replica, offset))
        log.info("%s p%d: %s, replica %d at offset %d", self.stream, partition, move.value, replica, offset)

    def switch(
        self,
        partition: int,
        replica: int,
        keep: bool = False,
        seek: tuple[int, int] | None = None,
        move: Move = Move.GAP,
    ) -> int:
        """Read ``partition`` from ``replica`` from now on, right after the last stable tuple (``keep``:
        after the t_max of the tentative tuples held there; ``seek``: that place and the writer epoch
        there, if known already; ``move``: the rule that applied, which says what the view keeps
        (``PartitionView.moved``)); returns the offset."""
        v, reader = self.views[partition], self.readers[partition]
        old = reader.replica
        reader.last_stable, reader.tmax = v.last_stable, v.tmax
        # Nothing read yet and only new tuples wanted: start at the end.
        at = None if v.started or self.from_beginning else OFFSET_END
        offset = reader.move(self.consumer, self.bootstrap, replica, at, keep, None if at is not None else seek)
        v.moved(replica, move, self._pending)
        v.gate = reader.gate
        self.switches.append((partition, old, replica, offset))
        log.info("%s p%d: switched from replica %d to %d at offset %d", self.stream, partition, old, replica, offset)
        return offset

    def resume_after(self, partition: int, tid: int) -> int:
        """Read ``partition`` from right after stable id ``tid``, as a reader that has every stable tuple up
        to it does (an egress going on after its committed tail); returns the offset."""
        v = self.views[partition]
        v.last_stable, v.started = tid, True
        return self.switch(partition, self.readers[partition].replica)

    # -- reading --------------------------------------------------------------
    def poll(self, timeout: float = 0.2, max_messages: int = 500) -> list[ViewEvent]:
        """Events of the messages that arrived, in arrival order (switching replica first if due)."""
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self.check_interval
            self.check_replicas()
        out, self._pending = self._pending, []
        readers, views = self.readers, self.views
        msgs: list[Message] = []
        if self.fresh_consumer is not self.consumer and any(r.fresh is not None for r in readers.values()):
            msgs = self.fresh_consumer.consume(max_messages, 0)  # new tuples first, not behind corrections
        msgs += consume_ready(self.consumer, max_messages, 0 if msgs else timeout)
        for m in msgs:
            if m.error() is not None:
                continue
            p = m.partition() or 0
            reader = readers[p]
            topic, fresh = m.topic(), False
            if topic != reader.topic:
                if topic != reader.fresh_topic:
                    continue  # fetched from a replica this partition has left
                fresh = True
            v = views[p]
            try:
                got = v.take(
                    m.headers(), m.value(), out, reader.fresh if fresh else reader.replica, m.offset() or 0, fresh
                )
            except HeaderError:
                self.bad += 1
                continue
            if got is not None and not fresh and (got[0] is REC_DONE or got[0] is UNDO):
                reader.control(got[0])
            if v.fresh is None and reader.fresh is not None:  # the followed replica's REC_DONE
                reader.end_fresh()
            if got is not None and v.gap is not None and reader.gap is None:
                reader.last_stable = v.last_stable
                reader.report_gap(got[1])
        for reader in readers.values():
            if reader.gap is not None:  # read the missing ids again, from another replica if one lives
                self.switch(reader.partition, reader.gap_replica(self.monitor))
        if self.stable_only:
            out = [e for e in out if e.kind == "stable"]
        return out

    def follow(self, idle_timeout: float | None = None) -> Iterator[ViewEvent]:
        """Events as they arrive; stops after ``idle_timeout`` seconds without any."""
        return follow_polls(self.poll, idle_timeout)

    def read_until(self, predicate: Callable[[StreamView], bool], timeout: float = 60.0) -> list[ViewEvent]:
        """Poll until ``predicate(self)`` holds or ``timeout`` passes; returns the events seen."""
        got: list[ViewEvent] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got.extend(self.poll(timeout=0.1))
            if predicate(self):
                break
        return got

    # -- results --------------------------------------------------------------
    def stable(self, partition: int) -> list[Any]:
        return self.views[partition].stable

    def tentative(self, partition: int) -> list[Any]:
        return [e.record for e in self.views[partition].tentative]

    def close(self) -> None:
        self.consumer.close()
        if self.fresh_consumer is not self.consumer:
            self.fresh_consumer.close()
        if self._own_monitor and self.monitor is not None:
            self.monitor.close()

    def __enter__(self) -> StreamView:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
