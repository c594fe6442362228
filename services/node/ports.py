"""Input ports: which replica of each upstream stream a node reads, and what it has from it.

DPC lets a downstream node read any replica of an upstream node. A ``ReplicaReader``
follows one replica's topic of one stream partition at a time and moves (monitoring their
heartbeats) to another replica in a better state (``services.control.replicas``): STABLE
over UPSTREAM_FAILURE over STABILIZATION over RECOVERING, never a FAILED one, and in one
state away from a replica whose output lags by more than the failure timeout. Stable tuple ids are the same on every replica, so a
move continues in the new topic right after the last stable tuple the reader has. Node
input ports and client views (``services.client.view``) both read through it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from services.control.monitor import ReplicaMonitor
from services.control.replicas import RANK, choose_replica
from services.core.codec import codec_for
from services.core.errors import InputGapError
from services.core.kafka import BatchConsumer, retry_transient
from services.core.tuples import EpochGate
from services.dpc.states import NodeState
from services.log.tail import seek_after_stable
from services.node.ingress import RawReader
from services.spec.plan import InputPlan

log = logging.getLogger(__name__)


@dataclass
class ReplicaReader:
    """One partition of a replicated stream as one reader follows it."""

    topics: list[str]  # one per upstream replica
    partition: int
    upstream: str | None  # producing node, None for a source stream (one topic, never moves)
    replica: int = 0  # the replica read now
    last_stable: int = -1  # id of the newest stable tuple received
    switches: int = 0
    gap: int | None = None  # id of the first stable tuple that did not come (the next came instead)
    gap_tried: set[int] = field(default_factory=set)  # replicas read again for that gap
    gaps: int = 0  # gaps seen
    gate: EpochGate = field(default_factory=EpochGate)  # the writer epochs of the topic read now

    @property
    def topic(self) -> str:
        return self.topics[self.replica]

    def states(self, monitor: ReplicaMonitor | None) -> list[NodeState]:
        """Each upstream replica's state (all STABLE when nothing tells otherwise)."""
        if monitor is None or self.upstream is None:
            return [NodeState.STABLE] * len(self.topics)
        return monitor.states(self.upstream, self.partition, len(self.topics))

    def better_replica(self, monitor: ReplicaMonitor | None) -> int | None:
        """The replica to move to now, or None to stay."""
        if self.upstream is None or len(self.topics) < 2:
            return None
        states = self.states(monitor)
        if all(s is NodeState.FAILED for s in states):
            return None  # no news (monitor starting, or all down): keep waiting where we are
        bounds = monitor.boundaries(self.upstream, self.partition, len(self.topics)) if monitor is not None else None
        behind_ms = int(monitor.timeout_s * 1000) if monitor is not None else 0
        r = choose_replica(states, self.replica, bounds, behind_ms)
        return r if r != self.replica else None

    def report_gap(self, got: int) -> None:
        """Stable tuple ``got`` came where ``last_stable + 1`` was due: read that id again elsewhere."""
        missing = self.last_stable + 1
        if self.gap != missing:
            if self.gap is None or missing > self.gap:
                self.gap_tried = set()
            self.gaps += 1
            log.warning(
                "%s p%d: stable ids %d..%d missing; reading them again", self.topic, self.partition, missing, got - 1
            )
        self.gap = missing

    def gap_replica(self, monitor: ReplicaMonitor | None) -> int:
        """Where to read the missing ids from next: a live replica not yet tried, best first."""
        assert self.gap is not None
        self.gap_tried.add(self.replica)
        states = self.states(monitor)
        untried = [r for r in range(len(self.topics)) if r not in self.gap_tried and states[r] is not NodeState.FAILED]
        if not untried:
            raise InputGapError(
                f"{self.topics[0].rsplit('.r', 1)[0]} partition {self.partition}: stable tuple {self.gap} is missing "
                f"from every replica's log ({', '.join(self.topics)}): retention or trimming removed it before "
                "it was read; raise the retention of these topics"
            )
        return min(untried, key=lambda r: (RANK[states[r]], r))

    def move(self, consumer: Consumer, bootstrap: str, replica: int, offset: int | None = None) -> int:
        """Read ``replica`` from now on, right after the last stable tuple (or at ``offset``); returns the offset.

        The reader then drops what writers older than the epoch in force there write (``gate``)."""
        epoch = 0
        if offset is None:
            offset, epoch = seek_after_stable(bootstrap, self.topics[replica], self.partition, self.last_stable)
        self.gate = EpochGate(epoch)
        consumer.incremental_unassign([TopicPartition(self.topic, self.partition)])
        consumer.incremental_assign([TopicPartition(self.topics[replica], self.partition, offset)])
        if replica != self.replica:
            self.switches += 1
        self.replica = replica
        self.gap = None
        return offset


@dataclass
class InputPort(ReplicaReader):
    """A node's input: one stream partition, its SUnion input number and its decoder."""

    stream: str = field(kw_only=True)
    index: int = field(kw_only=True)  # its SUnion input number
    decode: Callable[[bytes | None], Any] = field(kw_only=True)  # the stream's Avro decoder
    raw: RawReader | None = field(default=None, kw_only=True)  # an ingress's raw topic: ids are offsets

    def move(self, consumer: Consumer, bootstrap: str, replica: int, offset: int | None = None) -> int:
        """As ``ReplicaReader.move``; a raw topic's tuple ids are offsets, so it goes on right after."""
        if self.raw is not None and offset is None:
            offset = self.last_stable + 1 if self.last_stable >= 0 else OFFSET_BEGINNING
        return super().move(consumer, bootstrap, replica, offset)


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
            )
            for p in plans
        ]
        self.partition = partition
        self.by_topic = {p.topic: p for p in self.ports}
        self.consumer: BatchConsumer | None = None
        # Where each topic was assigned from: its position until a message is read from it.
        self.assigned: dict[str, int] = {}

    def open(self, consumer: BatchConsumer, offsets: dict[str, int]) -> None:
        """Start reading every port's topic at ``offsets`` (by topic), else from the beginning."""
        self.consumer = consumer
        self.by_topic = {p.topic: p for p in self.ports}
        self.assigned = {p.topic: offsets.get(p.topic, OFFSET_BEGINNING) for p in self.ports}
        consumer.assign_offsets([TopicPartition(t, self.partition, off) for t, off in self.assigned.items()])

    def poll(self, max_messages: int, timeout_s: float) -> list[Message]:
        assert self.consumer is not None
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
            p.last_stable = last_stable[p.stream]
            self.assigned[p.topic] = p.move(self.consumer.raw, bootstrap, p.replica)

    def lags(self) -> dict[str, int]:
        """Input messages in the logs not read yet, per input stream, from the end offsets the last
        fetches brought (no request)."""
        assert self.consumer is not None
        raw, pos, out = self.consumer.raw, self.positions(), {}
        for p in self.ports:
            first, end = raw.get_watermark_offsets(TopicPartition(p.topic, self.partition), cached=True)
            out[p.stream] = max(0, end - max(pos[p.topic], first)) if end >= 0 else 0
        return out

    def follow_best(self, monitor: ReplicaMonitor, bootstrap: str) -> list[InputPort]:
        """Move each port whose upstream replica is no longer the best, or that must read a gap
        again; returns the ports that moved."""
        assert self.consumer is not None
        moved = []
        for p in self.ports:
            r = p.gap_replica(monitor) if p.gap is not None else p.better_replica(monitor)
            if r is None:
                continue
            old = p.topic
            off = p.move(self.consumer.raw, bootstrap, r)
            self.assigned.pop(old, None)
            self.assigned[p.topic] = off
            self.by_topic = {q.topic: q for q in self.ports}
            moved.append(p)
            log.info("input %s p%d now reads %s from offset %d (was %s)", p.stream, self.partition, p.topic, off, old)
        return moved
