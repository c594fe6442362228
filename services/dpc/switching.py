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
   and reads only tentative tuples beyond them, by their t_max (a field of ``ht``, the tuple time
   of the last input tuple processed before each), so none is received twice.
4. away from a replica in STABILIZATION: the reader keeps reading it in the background for
   its corrections (UNDO, stable tuples, REC_DONE) while new tentative tuples come from a
   replica in UPSTREAM_FAILURE (``fresh``), until the corrected stream's REC_DONE, even once
   its heartbeat says it is STABLE: its new stable tuples come after its corrections. The same
   pair forms from the other side (``Move.CORRECT``): a reader following a replica in
   UPSTREAM_FAILURE whose partner begins to reconcile follows the partner from its UNDO, and
   the replica it followed goes on as the fresh one.

A fresh replica is read through a consumer of its own: in one consumer's queue its few new
tuples would wait behind the thousands of corrections fetched before them.

The seek that finds where a move starts in the new topic (a scan back from its tail) runs
on a helper thread (``plan``): meanwhile the reader goes on reading the replica it follows, so
its corrections and new results keep coming; the move applies when the offset is known.

Node input ports and client views (``services.client.view``) both read through it.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Callable

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from services.control.monitor import ReplicaMonitor
from services.control.replicas import RANK, choose_replica
from services.control.states import NodeState
from services.core.errors import InputGapError
from services.core.tuples import REC_DONE, UNDO, EpochGate, TupleType
from services.dpc import seeks

log = logging.getLogger(__name__)


class Move(Enum):
    """What a reader does about its upstream replicas (the paper's switching rules)."""

    STABLE = "stable"  # rules 1-2: to a stable replica, after the last stable tuple; tentative input replaced
    TENTATIVE = "tentative"  # rule 3: to a replica in a failure, keeping tentative input, after its t_max
    FRESH = "fresh"  # rule 4: new tuples from another replica while the followed one reconciles
    PROMOTE = "promote"  # rule 3: the followed replica failed while reconciling: follow the fresh one
    END_FRESH = "end fresh"  # the followed replica has reconciled (or the fresh one is no use): read it alone
    # Rule 4 from the other side: a partner began to reconcile; follow it for its corrections, at its
    # UNDO, while the replica followed so far goes on as the fresh one, where it is read now.
    CORRECT = "correct"
    GAP = "gap"  # stable ids are missing: read them again elsewhere


SEEKING = (Move.STABLE, Move.TENTATIVE, Move.FRESH, Move.CORRECT)  # the moves that start somewhere in another topic
STANDBY_S = 1.0  # how often rule 4's start in a partner is sought ahead, while the followed replica is in a failure


def after_last_id(reader: ReplicaReader) -> int:
    """A move's start in a log whose tuple ids are its offsets (an ingress's raw topic): right after
    the last stable id."""
    return reader.last_stable + 1 if reader.last_stable >= 0 else OFFSET_BEGINNING


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
    fresh_consumer: Consumer | None = field(default=None, repr=False)  # where the fresh replica is read
    fresh_from: int = 0  # the offset the fresh read started at
    pending: seeks.Pending | None = None  # a move whose seek runs
    standby: seeks.Standby | None = None  # rule 4's start, sought ahead while the followed replica is in a failure
    # The followed replica's REC_DONE was read and no UNDO since: its stream is stable again before
    # its heartbeat says so (a switch away from its STABILIZATION would only read it again elsewhere).
    corrected: bool = False
    # Where a move starts when it is not told: None looks for the last stable id in the new topic
    # (``services.dpc.seeks``); a log whose ids are its offsets goes on right after it (``after_last_id``).
    start: Callable[[ReplicaReader], int] | None = field(default=None, repr=False)
    # The upstream partition whose replicas' states it follows (None: ``partition``); across an
    # exchange, the producer partition of its connection (``services.spec.exchanges``).
    source: int | None = None

    @property
    def upstream_partition(self) -> int:
        return self.partition if self.source is None else self.source

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
        states = monitor.states(self.upstream, self.upstream_partition, len(self.topics))
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
            if states[cur] is NodeState.FAILED and states[fresh] is not NodeState.FAILED:
                return Move.PROMOTE, fresh
            if states[fresh] is NodeState.UPSTREAM_FAILURE and (
                # Reconciled, but its REC_DONE is still ahead in the log: its new stable tuples come only
                # after the corrections, and the fresh replica's come meanwhile (the REC_DONE ends it).
                states[cur] is NodeState.STABLE
                or (states[cur] is NodeState.STABILIZATION and NodeState.STABLE not in states)
            ):
                return None
            return Move.END_FRESH, fresh
        correcting = self._correcting()
        if correcting is not None and states[cur] is NodeState.UPSTREAM_FAILURE and NodeState.STABLE not in states:
            if states[correcting] is NodeState.STABILIZATION:
                return Move.CORRECT, correcting
        bounds = (
            monitor.boundaries(self.upstream, self.upstream_partition, len(self.topics))
            if monitor is not None
            else None
        )
        behind_ms = int(monitor.timeout_s * 1000) if monitor is not None else 0
        r = choose_replica(states, cur, bounds, behind_ms)
        if r == cur:
            return None
        if states[cur] is NodeState.STABILIZATION and states[r] is NodeState.UPSTREAM_FAILURE:
            return Move.FRESH, r
        return (Move.STABLE if states[r] is NodeState.STABLE else Move.TENTATIVE), r

    def _correcting(self) -> int | None:
        """The partner whose corrections ``Move.CORRECT`` would read: one whose tentative run the
        standby found (its UNDO follows there), or the one that move seeks in already."""
        sb, p = self.standby, self.pending
        if sb is not None and sb.known() is not None:
            return sb.replica
        return p.replica if p is not None and p.move is Move.CORRECT else None

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
            self.prepare_fresh(monitor, bootstrap, fresh_skip)
            return None
        move, r = step
        if move not in SEEKING or not self.seeks():
            return move, r, None
        if p is None:
            self.pending = p = seeks.Pending(move, r, self._seek_for(move, r, bootstrap, fresh_skip))
        if not p.seek.done():
            return None
        self.pending = None
        found = p.seek.result()
        return None if found is None else (move, r, found)

    def prepare_fresh(self, monitor: ReplicaMonitor | None, bootstrap: str, skip: int | None) -> None:
        """While the followed replica and a partner are both in a failure, seek rule 4's start in the
        partner ahead, every ``STANDBY_S``: when the followed one begins to reconcile, the results due
        meanwhile come from the partner at once, not after a seek. A start sought earlier is as right,
        since the reader drops the tentative tuples it has by their t_max; it only reads a few more."""
        if skip is None or self.fresh is not None or self.upstream is None or not self.seeks():
            self.standby = None
            return
        states = self.states(monitor)
        partners = [r for r, s in enumerate(states) if r != self.replica and s is NodeState.UPSTREAM_FAILURE]
        if states[self.replica] is not NodeState.UPSTREAM_FAILURE or not partners:
            self.standby = None
            return
        sb, now = self.standby, time.monotonic()
        if sb is None or sb.replica != partners[0]:
            seek = seeks.SEEKS.submit(partial(seeks.seek_fresh_start, self), bootstrap, self.topics[partners[0]], skip)
            self.standby = seeks.Standby(partners[0], now, seek)
        elif sb.seek.done() and now - sb.at >= STANDBY_S:
            ready = sb.seek.result() if sb.seek.exception() is None else sb.ready
            sb.at, sb.ready = now, ready
            sb.seek = seeks.SEEKS.submit(
                partial(seeks.seek_fresh_start, self), bootstrap, self.topics[sb.replica], skip
            )

    def seeks(self) -> bool:
        """Whether a move must look for its start in the new topic."""
        return self.start is None

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
        self.end_fresh()
        self.pending, self.corrected = None, False
        epoch = 0
        if seek is not None:
            offset, epoch = seek
        elif offset is None and self.start is not None:
            offset = self.start(self)
        elif offset is None:
            offset, epoch = seeks.seek(
                self, bootstrap, self.topics[replica], self.last_stable, self.tmax if keep else None
            )
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

    def _seek_for(self, move: Move, r: int, bootstrap: str, fresh_skip: int | None) -> Future[tuple[int, int] | None]:
        """Start the seek of ``move`` to replica ``r`` on a helper thread, from what the standby found
        in ``r`` if it did (``prepare_fresh``)."""
        topic, sb = self.topics[r], self.standby
        self.standby = None
        known = sb.known() if sb is not None and sb.replica == r else None
        if move is Move.FRESH and known is not None:
            done: Future[tuple[int, int] | None] = Future()
            done.set_result(known)
            return done
        if move is Move.FRESH:
            return seeks.SEEKS.submit(partial(seeks.seek_fresh_start, self), bootstrap, topic, fresh_skip)
        if move is Move.CORRECT:  # it reconciles: its UNDO follows what the standby found, or is about to
            start = known[0] if known is not None else 0
            return seeks.SEEKS.submit(
                seeks.undo_after, bootstrap, topic, self.partition, start, self.last_stable, 5000, 1.0
            )
        if move is Move.STABLE and known is not None:  # it has reconciled since: its UNDO follows
            return seeks.SEEKS.submit(
                partial(seeks.seek_stable_from, self), bootstrap, topic, self.last_stable, known[0]
            )
        tmax = self.tmax if move is Move.TENTATIVE else None
        return seeks.SEEKS.submit(partial(seeks.seek, self), bootstrap, topic, self.last_stable, tmax)

    def start_fresh(
        self, consumer: Consumer, bootstrap: str, replica: int, skip: int | None, seek: tuple[int, int] | None = None
    ) -> int:
        """Rule 4: read ``replica``'s new tentative tuples too, those with a t_max above ``skip`` (what
        the reader has of them), through ``consumer``, while the followed replica reconciles; returns
        the offset. ``seek``: where that starts and the epoch there, if ``plan`` sought it already."""
        self.tmax = self.skip_upto = skip
        self.pending = None
        offset, epoch = (
            seek if seek is not None else seeks.seek_fresh_start(self, bootstrap, self.topics[replica], skip)
        )
        self.fresh, self.fresh_gate = replica, EpochGate(epoch)
        self.fresh_consumer, self.fresh_from = consumer, offset
        consumer.incremental_assign([TopicPartition(self.topics[replica], self.partition, offset)])
        self.switches += 1
        return offset

    def correct(
        self, consumer: Consumer, fresh_consumer: Consumer, replica: int, seek: tuple[int, int], at: int | None = None
    ) -> int:
        """``Move.CORRECT``: follow ``replica`` from its UNDO (``seek``: its offset and the epoch there),
        read by ``consumer``, while the replica followed so far goes on as the fresh one, read by
        ``fresh_consumer`` from where it is read now (``at`` if nothing was read from it since it
        was assigned there); returns the UNDO's offset."""
        offset, epoch = seek
        old = TopicPartition(self.topic, self.partition)
        self.skip_upto = None  # the fresh replica continues where it is: nothing of it is held twice
        if fresh_consumer is not consumer:
            read = consumer.position([old])[0].offset
            pos = read if read >= 0 else at
            if pos is None:  # unknown: from its end, past the tentative tuples held
                pos, self.skip_upto = OFFSET_END, self.tmax
            consumer.incremental_unassign([old])
            fresh_consumer.incremental_assign([TopicPartition(old.topic, self.partition, pos)])
            self.fresh_from = pos
        self.fresh, self.fresh_gate, self.fresh_consumer = self.replica, self.gate, fresh_consumer
        consumer.incremental_assign([TopicPartition(self.topics[replica], self.partition, offset)])
        self.replica, self.gate, self.corrected, self.pending = replica, EpochGate(epoch), False, None
        self.switches += 1
        return offset

    def end_fresh(self) -> None:
        """Stop reading the fresh replica (the followed one reconciled, or the fresh one is no use)."""
        if self.fresh is not None and self.fresh_consumer is not None:
            self.fresh_consumer.incremental_unassign([TopicPartition(self.topics[self.fresh], self.partition)])
        self.fresh = self.fresh_consumer = None

    def promote_fresh(self, consumer: Consumer) -> int:
        """The followed replica failed while reconciling: follow the fresh one, read by ``consumer``
        from now on where its fresh read is; returns that offset (-1 if it is read there already)."""
        assert self.fresh is not None and self.fresh_consumer is not None
        consumer.incremental_unassign([TopicPartition(self.topic, self.partition)])
        at, source = -1, self.fresh_consumer
        if source is not consumer:
            tp = TopicPartition(self.topics[self.fresh], self.partition)
            read = source.position([tp])[0].offset
            at = read if read >= 0 else self.fresh_from  # nothing read there yet
            source.incremental_unassign([tp])
            consumer.incremental_assign([TopicPartition(tp.topic, self.partition, at)])
        self.replica, self.gate, self.fresh, self.corrected = self.fresh, self.fresh_gate, None, False
        self.fresh_consumer = None
        return at
