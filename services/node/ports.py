"""Input ports: which replica of each upstream stream a node reads, and what it has from it.

DPC lets a downstream node read any replica of an upstream node. A ``ReplicaReader``
follows one replica's topic of one stream partition and moves (monitoring their
heartbeats) to another replica in a better state (``services.control.replicas``): STABLE
over UPSTREAM_FAILURE over STABILIZATION over RECOVERING, never a FAILED one, and in one
state away from a replica whose output lags by more than the failure timeout. A move is
one of the paper's switches (``Move``):

1. and 2. to a STABLE replica: right after the last stable tuple the reader has (stable
   ids are the same on every replica); the reader's tentative tuples are replaced.
3. to a replica in UPSTREAM_FAILURE (or recovering): the reader keeps its tentative tuples
   and reads only tentative tuples beyond them, by their t_max (``ht.tmax``, the tuple time
   of the last input tuple processed before each), so none is received twice.
4. away from a replica in STABILIZATION: the reader keeps reading it in the background for
   its corrections (UNDO, stable tuples, REC_DONE) while new tentative tuples come from a
   replica in UPSTREAM_FAILURE (``fresh``), until the corrected stream's REC_DONE.

The seek that finds where a move starts in the new topic (a scan back from its tail) runs
on a helper thread (``plan``): meanwhile the reader goes on reading the replica it follows, so
its corrections and new results keep coming; the move applies when the offset is known.

Node input ports and client views (``services.client.view``) both read through it.
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from services.control.monitor import ReplicaMonitor
from services.control.replicas import RANK, choose_replica
from services.core.codec import codec_for
from services.core.errors import InputGapError
from services.core.kafka import BatchConsumer, know_topics, retry_transient
from services.core.tuples import REC_DONE, UNDO, EpochGate, TupleType
from services.dpc.states import NodeState
from services.log.tail import seek_after_stable, seek_after_tentative
from services.node.ingress import RawReader
from services.spec.plan import InputPlan

log = logging.getLogger(__name__)

# Where the seeks of moves run (a scan of the new topic's tail with a consumer of its own).
SEEKS: Executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="replica-seek")


class Move(Enum):
    """What a reader does about its upstream replicas (the paper's switching rules)."""

    STABLE = "stable"  # rules 1-2: to a stable replica, after the last stable tuple; tentative input replaced
    TENTATIVE = "tentative"  # rule 3: to a replica in a failure, keeping tentative input, after its t_max
    FRESH = "fresh"  # rule 4: new tuples from another replica while the followed one reconciles
    PROMOTE = "promote"  # rule 3: the followed replica failed while reconciling: follow the fresh one
    END_FRESH = "end fresh"  # the followed replica has reconciled (or the fresh one is no use): read it alone
    GAP = "gap"  # stable ids are missing: read them again elsewhere


SEEKING = (Move.STABLE, Move.TENTATIVE, Move.FRESH)  # the moves that start somewhere in another topic


@dataclass
class Pending:
    """A move waiting for its seek: where it starts in the new topic, and the writer epoch there."""

    move: Move
    replica: int
    seek: Future[tuple[int, int]]


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
    tmax: int | None = None  # highest t_max of the tentative tuples the reader holds (None: holds none)
    # After a switch that kept them: the new replica's tentative tuples up to this t_max are held already.
    skip_upto: int | None = None
    fresh: int | None = None  # rule 4: the replica new tentative tuples come from while ``replica`` reconciles
    fresh_gate: EpochGate = field(default_factory=EpochGate)  # the writer epochs of the fresh replica's topic
    pending: Pending | None = None  # a move whose seek runs
    # The followed replica's REC_DONE was read and no UNDO since: its stream is stable again before
    # its heartbeat says so (a switch away from its STABILIZATION would only read it again elsewhere).
    corrected: bool = False

    @property
    def fresh_topic(self) -> str | None:
        return None if self.fresh is None else self.topics[self.fresh]

    @property
    def topic(self) -> str:
        return self.topics[self.replica]

    def states(self, monitor: ReplicaMonitor | None) -> list[NodeState]:
        """Each upstream replica's state (all STABLE when nothing tells otherwise)."""
        if monitor is None or self.upstream is None:
            return [NodeState.STABLE] * len(self.topics)
        states = monitor.states(self.upstream, self.partition, len(self.topics))
        if self.corrected:
            if states[self.replica] is NodeState.STABILIZATION:
                states = [NodeState.STABLE if r == self.replica else s for r, s in enumerate(states)]
            elif states[self.replica] in (NodeState.STABLE, NodeState.FAILED):
                self.corrected = False  # the heartbeats caught up
        return states

    def control(self, ttype: TupleType) -> None:
        """The followed replica's UNDO or REC_DONE was read: whether its stream is corrected now."""
        if ttype is REC_DONE:
            self.corrected, self.pending = True, None
        elif ttype is UNDO:
            self.corrected = False

    def next_move(self, monitor: ReplicaMonitor | None) -> tuple[Move, int] | None:
        """What to do now about the upstream replicas (``Move`` and a replica), or None to go on as is."""
        if self.gap is not None:
            return Move.GAP, self.gap_replica(monitor)
        if self.upstream is None or len(self.topics) < 2:
            return None
        states = self.states(monitor)
        if all(s is NodeState.FAILED for s in states):
            return None  # no news (monitor starting, or all down): keep waiting where we are
        cur, fresh = self.replica, self.fresh
        if fresh is not None:
            if states[cur] is NodeState.STABILIZATION and states[fresh] is NodeState.UPSTREAM_FAILURE:
                if NodeState.STABLE not in states:
                    return None
            elif states[cur] is NodeState.FAILED and states[fresh] is not NodeState.FAILED:
                return Move.PROMOTE, fresh
            return Move.END_FRESH, fresh
        bounds = monitor.boundaries(self.upstream, self.partition, len(self.topics)) if monitor is not None else None
        behind_ms = int(monitor.timeout_s * 1000) if monitor is not None else 0
        r = choose_replica(states, cur, bounds, behind_ms)
        if r == cur:
            return None
        if states[cur] is NodeState.STABILIZATION and states[r] is NodeState.UPSTREAM_FAILURE:
            return Move.FRESH, r
        return (Move.STABLE if states[r] is NodeState.STABLE else Move.TENTATIVE), r

    def plan(
        self, monitor: ReplicaMonitor | None, bootstrap: str, fresh_skip: int | None
    ) -> tuple[Move, int, tuple[int, int] | None] | None:
        """The move to make now with its seek's result (None: the move seeks itself), or None.

        A move that starts somewhere in another topic is returned once its seek, started on a
        helper thread, is done and the move is still the one to make; until then the reader goes
        on as is. ``fresh_skip``: the t_max a fresh replica's tuples must pass (rule 4)."""
        step = self.next_move(monitor)
        p = self.pending
        if p is not None and (step is None or step != (p.move, p.replica)):
            self.pending = p = None  # the states changed while it sought: decide again
        if step is None:
            return None
        move, r = step
        if move not in SEEKING or not self.seeks():
            return move, r, None
        if p is None:
            keep = move is not Move.STABLE
            tmax = fresh_skip if move is Move.FRESH else self.tmax
            seek = SEEKS.submit(self._seek, bootstrap, self.topics[r], self.last_stable, tmax if keep else None)
            self.pending = p = Pending(move, r, seek)
        if not p.seek.done():
            return None
        self.pending = None
        return move, r, p.seek.result()

    def seeks(self) -> bool:
        """Whether a move must look for its start in the new topic."""
        return True

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

    def move(
        self,
        consumer: Consumer,
        bootstrap: str,
        replica: int,
        offset: int | None = None,
        keep: bool = False,
        seek: tuple[int, int] | None = None,
    ) -> int:
        """Read ``replica`` from now on, right after the last stable tuple (or at ``offset``); returns the offset.
        ``keep``: the reader keeps its tentative tuples (rule 3), so it starts after their t_max there.
        ``seek``: where that is and the epoch there, if ``plan`` sought it already.

        The reader then drops what writers older than the epoch in force there write (``gate``)."""
        self.end_fresh(consumer)
        self.pending, self.corrected = None, False
        epoch = 0
        if seek is not None:
            offset, epoch = seek
        elif offset is None:
            offset, epoch = self._seek(bootstrap, self.topics[replica], self.last_stable, self.tmax if keep else None)
        self.tmax = self.tmax if keep else None
        self.skip_upto = self.tmax
        self.gate = EpochGate(epoch)
        consumer.incremental_unassign([TopicPartition(self.topic, self.partition)])
        consumer.incremental_assign([TopicPartition(self.topics[replica], self.partition, offset)])
        if replica != self.replica:
            self.switches += 1
        self.replica = replica
        self.gap = None
        return offset

    def _seek(self, bootstrap: str, topic: str, last_stable: int, tmax: int | None) -> tuple[int, int]:
        """Where to start in ``topic``: after the tentative tuples up to ``tmax`` held (rule 3), else
        after stable tuple ``last_stable``; and the writer epoch there."""
        if tmax is not None:
            return seek_after_tentative(bootstrap, topic, self.partition, last_stable, tmax)
        return seek_after_stable(bootstrap, topic, self.partition, last_stable)

    def start_fresh(
        self, consumer: Consumer, bootstrap: str, replica: int, skip: int | None, seek: tuple[int, int] | None = None
    ) -> int:
        """Rule 4: read ``replica``'s new tentative tuples too, those with a t_max above ``skip`` (what
        the reader has of them), while the followed replica reconciles; returns the offset.
        ``seek``: where that starts and the epoch there, if ``plan`` sought it already."""
        self.tmax = self.skip_upto = skip
        self.pending = None
        offset, epoch = (
            seek if seek is not None else self._seek(bootstrap, self.topics[replica], self.last_stable, skip)
        )
        self.fresh, self.fresh_gate = replica, EpochGate(epoch)
        consumer.incremental_assign([TopicPartition(self.topics[replica], self.partition, offset)])
        self.switches += 1
        return offset

    def end_fresh(self, consumer: Consumer) -> None:
        """Stop reading the fresh replica (the followed one reconciled, or the fresh one is no use)."""
        if self.fresh is not None:
            consumer.incremental_unassign([TopicPartition(self.topics[self.fresh], self.partition)])
            self.fresh = None

    def promote_fresh(self, consumer: Consumer) -> None:
        """The followed replica failed while reconciling: follow the fresh one, where it is read now."""
        assert self.fresh is not None
        consumer.incremental_unassign([TopicPartition(self.topic, self.partition)])
        self.replica, self.gate, self.fresh, self.corrected = self.fresh, self.fresh_gate, None, False


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

    def move(
        self,
        consumer: Consumer,
        bootstrap: str,
        replica: int,
        offset: int | None = None,
        keep: bool = False,
        seek: tuple[int, int] | None = None,
    ) -> int:
        """As ``ReplicaReader.move``; a raw topic's tuple ids are offsets, so it goes on right after."""
        if self.raw is not None and offset is None:
            offset = self.last_stable + 1 if self.last_stable >= 0 else OFFSET_BEGINNING
        if not keep:
            self.processed_tmax = None
        return super().move(consumer, bootstrap, replica, offset, keep, seek)

    def seeks(self) -> bool:
        return self.raw is None  # a raw topic's ids are its offsets


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
        self.fresh_by_topic: dict[str, InputPort] = {}  # rule 4: the topics read for new tuples only
        self.consumer: BatchConsumer | None = None
        # Where each topic was assigned from: its position until a message is read from it.
        self.assigned: dict[str, int] = {}

    def open(self, consumer: BatchConsumer, offsets: dict[str, int]) -> None:
        """Start reading every port's topic at ``offsets`` (by topic), else from the beginning."""
        self.consumer = consumer
        self.by_topic = {p.topic: p for p in self.ports}
        self.assigned = {p.topic: offsets.get(p.topic, OFFSET_BEGINNING) for p in self.ports}
        consumer.assign_offsets([TopicPartition(t, self.partition, off) for t, off in self.assigned.items()])
        know_topics(consumer.raw, {t for p in self.ports for t in p.topics} - set(self.assigned))

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
        that changed what they read, and how."""
        assert self.consumer is not None
        moved = []
        for p in self.ports:
            step = p.plan(monitor, bootstrap, p.processed_tmax)
            if step is None:
                continue
            kind, r, seek = step
            old, fresh = p.topic, p.fresh_topic
            off = -1
            if kind is Move.FRESH:  # what the node has not processed yet of the reconciling replica's, it drops
                off = self.assigned[p.topics[r]] = p.start_fresh(
                    self.consumer.raw, bootstrap, r, p.processed_tmax, seek
                )
            elif kind is Move.END_FRESH:
                p.end_fresh(self.consumer.raw)
            elif kind is Move.PROMOTE:
                p.promote_fresh(self.consumer.raw)
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
            port.end_fresh(self.consumer.raw)
            self.assigned.pop(fresh, None)
            self._index()

    def _index(self) -> None:
        self.by_topic = {q.topic: q for q in self.ports}
        self.fresh_by_topic = {t: q for q in self.ports if (t := q.fresh_topic) is not None}
