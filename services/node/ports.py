"""Input ports: a node's inputs, each one stream partition read from the replica the switching
rules choose (``services.dpc.switching``), over one consumer (and a second one for rule 4's fresh
replica: in one consumer's queue its few new tuples would wait behind the thousands of
corrections fetched before them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from services.control.monitor import ReplicaMonitor
from services.core.codec import codec_for
from services.core.kafka import BatchConsumer, know_topics
from services.core.retry import retry_transient
from services.dpc.switching import Move, ReplicaReader, after_last_id
from services.node.ingress import RawReader
from services.spec.plan import InputPlan

log = logging.getLogger(__name__)


@dataclass
class InputPort(ReplicaReader):
    """A node's input: one stream partition, its SUnion input number and its decoder."""

    stream: str = field(kw_only=True)
    index: int = field(kw_only=True)  # its SUnion input number
    decode: Callable[[bytes | None], Any] = field(kw_only=True)  # the stream's Avro decoder
    raw: RawReader | None = field(default=None, kw_only=True)  # an ingress's raw topic: ids are offsets
    # The highest t_max of its tentative tuples the node has processed (its scheme keeps it): when a
    # fresh replica takes over (rule 4), the node drops the rest and reads them from the fresh one.
    processed_tmax: int | None = field(default=None, kw_only=True)
    # Started midway in its log on purpose (an amnesia takeover at the inputs' end): its first
    # stable tuple may have any id.
    midway: bool = field(default=False, kw_only=True)


class Inputs:
    """Every input port of a node replica partition over one consumer."""

    def __init__(self, plans: tuple[InputPlan, ...], partition: int, replica: int) -> None:
        # Replica k of a node starts on replica k mod R of each upstream node.
        self.ports = [
            InputPort(
                list(p.topics),
                partition,
                p.upstream,
                replica % p.replicas,
                stream=p.stream,
                index=p.index,
                decode=codec_for(p.schema).decode,
                raw=RawReader(p, partition) if p.ingress is not None else None,
                start=after_last_id if p.ingress is not None else None,  # a raw topic's ids are its offsets
                source=p.upstream_partition(partition),
            )
            for p in plans
        ]
        self.partition = partition
        self.by_topic = {p.topic: p for p in self.ports}
        self.fresh_by_topic: dict[str, InputPort] = {}  # rule 4: the topics read for new tuples only
        self.consumer: BatchConsumer | None = None
        self.fresh_consumer: BatchConsumer | None = None  # rule 4's reads (None: ``consumer``'s)
        # Where each topic was assigned from: its position until a message is read from it.
        self.assigned: dict[str, int] = {}
        self.idle = False  # opened to read nothing yet (``open`` without offsets), until ``read_from``
        self.held = False  # no input is fetched (``hold``): the scheme must not get further ahead

    def open(self, consumer: BatchConsumer, offsets: dict[str, int] | None, fresh: BatchConsumer | None = None) -> None:
        """Start reading every port's topic at ``offsets`` (by topic), else from the beginning, or
        (None) nothing yet; ``fresh``: the consumer for rule 4's reads of a second replica."""
        self.consumer, self.fresh_consumer = consumer, fresh
        others = {t for p in self.ports for t in p.topics} - {p.topic for p in self.ports}
        know_topics(consumer.raw, others)
        if fresh is not None:
            know_topics(fresh.raw, others)
        self.idle = offsets is None
        if offsets is not None:
            self.read_from(offsets)

    def hold(self, on: bool) -> None:
        """Stop reading every input (``on``), where it stands, or go on reading."""
        if on != self.held and self.consumer is not None:
            self.consumer.hold(on)
            self.held = on

    def read_from(self, offsets: dict[str, int]) -> None:
        """Read every port's topic from ``offsets`` (by topic; ``OFFSET_END``: what comes from now
        on), else from the beginning."""
        assert self.consumer is not None
        self.idle = self.held = False  # a new assignment is fetched
        self.by_topic = {p.topic: p for p in self.ports}
        self.assigned = {p.topic: offsets.get(p.topic, OFFSET_BEGINNING) for p in self.ports}
        self.consumer.assign_offsets([TopicPartition(t, self.partition, off) for t, off in self.assigned.items()])

    def poll(self, max_messages: int, timeout_s: float) -> list[Message]:
        """The next batch; a fresh replica's new tuples first (they do not wait behind corrections)."""
        assert self.consumer is not None
        fresh = self.fresh_consumer
        if fresh is not None and self.fresh_by_topic:
            first = fresh.poll_batch(max_messages, 0)
            if first:
                return first + self.consumer.poll_batch(max_messages, 0)
        return self.consumer.poll_batch(max_messages, timeout_s)

    def positions(self) -> dict[str, int]:
        """Next offset to read per input topic; where it was assigned from if nothing was read yet
        (Kafka knows no position then, and a restart must not fall back to the topic's start)."""
        assert self.consumer is not None
        read = {tp.topic: tp.offset for tp in self.consumer.positions()}
        return {p.topic: read.get(p.topic, self.assigned.get(p.topic, OFFSET_BEGINNING)) for p in self.ports}

    def ends(self) -> dict[str, tuple[int, int]]:
        """Each input topic's (first, end) offsets now, asked of the brokers."""
        assert self.consumer is not None
        watermarks = retry_transient(self.consumer.raw.get_watermark_offsets)
        return {p.topic: watermarks(TopicPartition(p.topic, self.partition), timeout=10) for p in self.ports}

    def reached(self, ends: dict[str, tuple[int, int]]) -> bool:
        """Whether every input has been read up to ``ends`` (an ``ends()`` of earlier); a port that
        moved to another replica since counts as there (its new topic was not asked about)."""
        pos = self.positions()
        return all(max(pos[t], first) >= end for t, (first, end) in ends.items() if t in pos)

    def rewind(self, last_stable: dict[str, int], bootstrap: str) -> None:
        """Read every port again right after the stable tuple ``last_stable[stream]``, on the
        replica it reads now (a spilled failure's redo)."""
        assert self.consumer is not None
        for p in self.ports:
            p.last_stable, p.processed_tmax = last_stable[p.stream], None
            self.assigned[p.topic] = p.move(self.consumer.raw, bootstrap, p.replica)
        self._index()

    def lags(self) -> dict[str, int]:
        """Input messages in the logs not read yet, per input stream, from the end offsets the last
        fetches brought (no request)."""
        assert self.consumer is not None
        raw, pos, out = self.consumer.raw, self.positions(), {}
        for p in self.ports:
            first, end = raw.get_watermark_offsets(TopicPartition(p.topic, self.partition), cached=True)
            out[p.stream] = max(0, end - max(pos[p.topic], first)) if end >= 0 else 0
        return out

    def follow_best(self, monitor: ReplicaMonitor, bootstrap: str) -> list[tuple[InputPort, Move]]:
        """Apply the switching rules to every port (``ReplicaReader.next_move``); returns the ports
        that changed what they read, and how. Inputs that read nothing yet (an HA candidate's, until
        its order) stay where they are: a move would unassign what was never assigned."""
        assert self.consumer is not None
        if self.idle:
            return []
        moved = []
        for p in self.ports:
            step = p.plan(monitor, bootstrap, p.processed_tmax)
            if step is None:
                continue
            kind, r, seek = step
            old, fresh = p.topic, p.fresh_topic
            off = -1
            if kind is Move.FRESH:  # what the node has not processed yet of the reconciling replica's, it drops
                fresh_reader = self.fresh_consumer or self.consumer
                off = self.assigned[p.topics[r]] = p.start_fresh(fresh_reader.raw, bootstrap, r, p.processed_tmax, seek)
            elif kind is Move.CORRECT:
                fresh_reader = self.fresh_consumer or self.consumer
                off = self.assigned[p.topics[r]] = p.correct(
                    self.consumer.raw, fresh_reader.raw, r, seek or (0, 0), self.assigned.get(old)
                )
            elif kind is Move.END_FRESH:
                p.end_fresh()
            elif kind is Move.PROMOTE:
                off = p.promote_fresh(self.consumer.raw)
                if off >= 0:
                    self.assigned[p.topic] = off
            else:
                off = self.assigned[p.topics[r]] = p.move(
                    self.consumer.raw, bootstrap, r, keep=kind is Move.TENTATIVE, seek=seek
                )
            for t in (old, fresh):
                if t is not None and t not in (p.topic, p.fresh_topic):
                    self.assigned.pop(t, None)
            self._index()
            moved.append((p, kind))
            log.info(
                "input %s p%d: %s, replica %d (offset %d; was reading %s)",
                p.stream,
                self.partition,
                kind.value,
                r,
                off,
                old,
            )
        return moved

    def end_fresh(self, port: InputPort) -> None:
        """The followed replica's REC_DONE came: its stable stream continues, the fresh one is not needed."""
        assert self.consumer is not None
        fresh = port.fresh_topic
        if fresh is not None:
            port.end_fresh()
            self.assigned.pop(fresh, None)
            self._index()

    def _index(self) -> None:
        self.by_topic = {q.topic: q for q in self.ports}
        self.fresh_by_topic = {t: q for q in self.ports if (t := q.fresh_topic) is not None}
