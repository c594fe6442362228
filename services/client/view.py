"""A client's view of a stream under DPC: the best replica, stable results, tentative ones, corrections.

A node's output exists once per replica (``<spec>.<stream>.r<k>``) and may hold TENTATIVE tuples
that a later UNDO voids and stable corrections replace. A client that wants the stream's
eventual result must follow one replica at a time, switch when it fails (continuing in
the other replica's log right after its last stable tuple), drop stable duplicates by id
and apply UNDOs. ``StreamView`` does that on Kafka; ``PartitionView`` is the Kafka-free core
that applies one partition's messages, so the contract is testable without a broker.

Contract (per partition): STABLE ids are dense (0, 1, ...) and the same on every replica;
TENTATIVE ids continue after the last stable id; UNDO(L) voids every tentative tuple (L is
the last stable id not undone) and the stable corrections L+1, ... follow; REC_DONE(L) ends
a reconciliation; BOUNDARY(stime B) promises no later tuple has stime < B; a stable tuple
with an id at or below the last stable id is a duplicate (after a restart or a switch); a
message with a lower epoch than one already read comes from a replaced copy of the
writer and is dropped.

Switching follows the paper's rules as node input ports do (``services.node.ports``): to a
stable replica after the last stable id, voiding the tentative tuples held; to a replica in
a failure keeping them, and taking only tentative tuples past their t_max;
away from a reconciling replica by reading its corrections and, meanwhile, a fresh
replica's new tentative tuples, until the corrected stream's REC_DONE.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, Message, TopicPartition

from services.client.reader import follow_polls
from services.control.monitor import ReplicaMonitor
from services.control.replicas import choose_replica
from services.control.states import NodeState
from services.core.codec import codec_for
from services.core.errors import HeaderError
from services.core.kafka import know_topics, plain_consumer
from services.core.tuples import (
    BOUNDARY,
    REC_DONE,
    STABLE,
    TENTATIVE,
    UNDO,
    EpochGate,
    RawHeaders,
    TupleType,
    admit,
    tmax_of,
)
from services.node.ports import Move, ReplicaReader
from services.spec import Spec

log = logging.getLogger(__name__)

EVENT_KINDS = ("stable", "tentative", "undo", "rec_done")


@dataclass(slots=True)
class ViewEvent:
    """What a client sees, in arrival order.

    ``stable``/``tentative``: a data tuple (``record`` decoded). ``undo``: every tentative
    tuple of the partition from ``replica`` with an id above ``id`` is void (corrections follow).
    ``rec_done``: the replica finished reconciling at stable id ``id``. ``replica`` is the
    replica whose log the event came from; ``offset`` its Kafka offset (-1 if none).
    """

    kind: str
    partition: int
    id: int
    stime: int
    record: dict[str, Any] | None = None
    replica: int = 0
    offset: int = -1


class PartitionView:
    """One partition of a stream as a client sees it: applies messages, keeps stable and tentative.

    ``stable`` holds the stable records in id order without duplicates (unless
    ``keep_stable=False``, for a long-running tail); ``tentative`` the events of the current
    tentative suffix. ``decode`` turns a payload into a record; it is only called for data
    tuples that are kept. With ``tentative=False`` tentative tuples are ignored entirely.
    """

    def __init__(
        self,
        partition: int = 0,
        decode: Callable[[bytes], Any] | None = None,
        keep_stable: bool = True,
        tentative: bool = True,
    ) -> None:
        self.partition = partition
        self.decode = decode
        self.keep_stable = keep_stable
        self.track_tentative = tentative
        self.replica = 0
        self.last_stable = -1  # id of the last stable tuple applied
        self.started = False  # some stable tuple was applied
        self.stable: list[Any] = []
        self.tentative: list[ViewEvent] = []
        self.boundary: int | None = None  # highest BOUNDARY stime seen
        self.rec_done: int | None = None  # id of the last REC_DONE applied
        self.duplicates = 0  # stable tuples dropped by id
        self.gap: int | None = None  # the stable id that did not come in order: to read again
        self.gaps = 0  # gaps met (each read again, never skipped)
        self.undone = 0  # tentative tuples voided
        self.bad = 0  # payloads that did not decode
        self.gate = EpochGate()  # the writer epochs of the log read now
        self.fenced = 0  # messages of replaced writers dropped
        self.tmax: int | None = None  # highest t_max of the tentative tuples held
        self.skip_upto: int | None = None  # after a switch keeping them: tentative tuples up to this t_max are held
        self.repeats = 0  # tentative tuples dropped because one with the same or a later t_max was held
        self.fresh: int | None = None  # the replica new tentative tuples come from while ``replica`` reconciles
        self.fresh_gate = EpochGate()
        # The t_max of the tentative tuples the followed replica's UNDO voided: its corrections cover them.
        self.corrected_tmax: int | None = None

    def _decode(self, payload: Any) -> tuple[bool, Any]:
        if self.decode is None:
            return True, payload
        try:
            return True, self.decode(payload)
        except Exception:  # noqa: BLE001 - a bad payload is counted and skipped, never fatal
            self.bad += 1
            return False, None

    def _void_after(self, last: int, out: list[ViewEvent], replica: int, stime: int = 0) -> None:
        """Drop held tentative tuples of ``replica`` with ids above ``last`` and say so."""
        keep = [e for e in self.tentative if e.replica != replica or e.id <= last]
        self.undone += len(self.tentative) - len(keep)
        self.tentative = keep
        out.append(ViewEvent("undo", self.partition, last, stime, None, replica))

    def _void(self, out: list[ViewEvent], stime: int = 0, only: int | None = None, last: int | None = None) -> None:
        """Drop the held tentative tuples (of replica ``only``, else all), one undo event per replica
        they came from (naming ``last``, else the id before the first of them)."""
        gone = [e for e in self.tentative if only is None or e.replica == only]
        if not gone:
            return
        for r in sorted({e.replica for e in gone}):
            first = min(e.id for e in gone if e.replica == r)
            self._void_after(min(first - 1, last) if last is not None else first - 1, out, r, stime)
        if only is None:
            self.tmax = self.skip_upto = None

    def take(
        self,
        headers: RawHeaders,
        payload: Any,
        out: list[ViewEvent],
        replica: int | None = None,
        offset: int = -1,
        fresh: bool = False,
    ) -> tuple[TupleType, int, int] | None:
        """Apply one message as read from the log (``fresh``: from the replica read for new tuples
        only), unless a replaced writer wrote it; returns its (type, id, stime), None if dropped;
        raises HeaderError."""
        got = admit(headers, self.fresh_gate if fresh else self.gate)
        if got is None:
            self.fenced += 1
            return None
        ttype, tid, stime, carried = got
        tm = tmax_of(headers) if ttype is TENTATIVE else None
        self.apply(ttype, tid, stime, payload, out, replica, offset, tm, fresh)
        if carried is not None and ttype is STABLE:
            self.apply(BOUNDARY, tid, carried, None, out, replica, offset)
        return ttype, tid, stime

    def apply(
        self,
        ttype: TupleType,
        tid: int,
        stime: int,
        payload: Any,
        out: list[ViewEvent],
        replica: int | None = None,
        offset: int = -1,
        tmax: int | None = None,
        fresh: bool = False,
    ) -> None:
        """Apply one message; append the resulting events (if any) to ``out``. ``tmax``: a tentative
        tuple's t_max; ``fresh``: it comes from the replica read for new tuples only."""
        r = self.replica if replica is None else replica
        if self.gap is not None:
            return  # the rest comes again, from where the missing ids are read
        if ttype is STABLE:
            if tid <= self.last_stable:
                self.duplicates += 1
                return
            if self.started and tid > self.last_stable + 1:
                self.gap = self.last_stable + 1
                self.gaps += 1
                return
            ok, rec = self._decode(payload)
            if not ok:
                return
            # A stable tuple without an UNDO first: the tentative suffix is stale.
            if self.tentative and self.fresh is None:
                self._void(out, stime, last=self.last_stable)
            self.last_stable, self.started = tid, True
            if self.keep_stable:
                self.stable.append(rec)
            out.append(ViewEvent("stable", self.partition, tid, stime, rec, r, offset))
        elif ttype is TENTATIVE:
            self._tentative(tid, stime, payload, out, r, offset, tmax, fresh)
        elif fresh:
            return  # of the fresh replica only new tuples count
        elif ttype is UNDO:
            if self.tentative:
                # While a fresh replica supplies new tuples, only the reconciling replica's are void.
                if self.fresh is None:
                    self.corrected_tmax = self.tmax
                self._void(out, stime, self.replica if self.fresh is not None else None, tid)
                return
            if self.started and tid < self.last_stable:
                return  # an old reconciliation replayed after a switch: nothing to say
            if self.track_tentative:
                out.append(ViewEvent("undo", self.partition, tid, stime, None, r, offset))
        elif ttype is REC_DONE:
            self.corrected_tmax = None
            if self.fresh is not None:
                self.end_fresh(out)  # corrected: the followed replica's stable stream goes on
            if self.started and tid < self.last_stable:
                return  # replayed
            self.rec_done = tid
            out.append(ViewEvent("rec_done", self.partition, tid, stime, None, r, offset))
        elif ttype is BOUNDARY:
            if self.boundary is None or stime > self.boundary:
                self.boundary = stime

    def _tentative(
        self,
        tid: int,
        stime: int,
        payload: Any,
        out: list[ViewEvent],
        r: int,
        offset: int,
        tmax: int | None,
        fresh: bool,
    ) -> None:
        if not self.track_tentative or (self.fresh is not None and not fresh):
            return  # not wanted, or from a reconciling replica while a fresh one supplies new tuples
        if not fresh and tid <= self.last_stable:
            return  # already replaced by stable tuples
        if tmax is not None and self.skip_upto is not None and tmax <= self.skip_upto:
            self.repeats += 1  # held already, from the replica read before a switch
            return
        if tmax is None:  # a writer without t_max that restarted its tentative run: the overlap is void
            mine = [e for e in self.tentative if e.replica == r]
            if mine and tid <= mine[-1].id:
                self._void_after(tid - 1, out, r, stime)
        ok, rec = self._decode(payload)
        if not ok:
            return
        if tmax is not None and (self.tmax is None or tmax > self.tmax):
            self.tmax = tmax
        ev = ViewEvent("tentative", self.partition, tid, stime, rec, r, offset)
        self.tentative.append(ev)
        out.append(ev)

    def switch(self, replica: int, out: list[ViewEvent], keep: bool = False) -> None:
        """Now reading ``replica``. Held tentative tuples are corrected there if it is stable, so
        they are void; ``keep``: it is in a failure, and only its tentative tuples past them come."""
        if not keep:
            self._void(out)
        self.skip_upto, self.corrected_tmax = self.tmax, None
        self.replica, self.fresh = replica, None
        self.gap = None

    def moved(self, replica: int, move: Move, out: list[ViewEvent]) -> None:
        """Now reading ``replica`` after a switch (``move``: STABLE, TENTATIVE or GAP). The tentative
        tuples held stay until tuples of the new replica replace them: its stable tuples void them
        (rule 2), and of its tentative tuples only those past their t_max count (rule 3). So a
        stable replica that turns tentative before its stable tuples come (its delay ran out just
        after the followed one's) gives no result twice. A GAP move reads the stream again: void."""
        self.switch(replica, out, keep=move is not Move.GAP)

    @property
    def fresh_skip(self) -> int | None:
        """The t_max up to which a fresh replica's tentative tuples are not wanted (rule 4): those held,
        and those the reconciling replica's UNDO voided if it came first, since its corrections cover them."""
        held = [t for t in (self.tmax, self.corrected_tmax) if t is not None]
        return max(held) if held else None

    def start_fresh(self, replica: int, gate: EpochGate) -> None:
        """``replica`` supplies new tentative tuples while the followed one reconciles (rule 4)."""
        self.fresh, self.fresh_gate = replica, gate
        self.skip_upto = self.fresh_skip

    def correct(self, replica: int, gate: EpochGate, fresh_gate: EpochGate) -> None:
        """``replica`` began to reconcile: it is followed for its corrections, and the replica followed
        so far supplies new tentative tuples (rule 4) from where it is read."""
        self.fresh, self.fresh_gate = self.replica, fresh_gate
        self.replica, self.gate = replica, gate
        self.skip_upto, self.gap = None, None

    def promote_fresh(self) -> None:
        """The reconciling replica failed: the fresh one is followed now, tentative tuples kept."""
        assert self.fresh is not None
        self.replica, self.gate, self.fresh = self.fresh, self.fresh_gate, None

    def end_fresh(self, out: list[ViewEvent]) -> None:
        """The followed replica reconciled: its stable stream replaces the fresh one's tentative tuples."""
        fresh, self.fresh = self.fresh, None
        if fresh is not None:
            self._void(out, only=fresh)
        self.tmax = self.skip_upto = None


class StreamView:
    """Reads a stream following the best replica per partition, applying the DPC contract.

    For a node output with several replicas, a ``ReplicaMonitor`` (given, or started on the
    spec's heartbeat topic) tells each replica's state; ``choose_replica`` picks the one to
    read and a switch continues in the new replica's topic right after the last stable id.
    A source stream (one topic) is read as is. ``poll()`` returns ``ViewEvent``s in arrival
    order (only "stable" ones with ``stable_only``).
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
        self.readers = [ReplicaReader(list(topics), p, self.node) for p in range(self.partitions)]
        for r, v in zip(self.readers, self.views, strict=True):  # the monitor has had its start-up wait
            r.replica = v.replica = self._choose(r.partition, None)
        self.consumer = plain_consumer(bootstrap, "view", unique=True, **{"fetch.wait.max.ms": 50})
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        self.consumer.assign([TopicPartition(r.topic, r.partition, start) for r in self.readers])
        # Rule 4's second replica is read apart: in one queue its new tuples would wait behind corrections.
        self.fresh_consumer = self.consumer
        if len(topics) > 1:
            self.fresh_consumer = plain_consumer(bootstrap, "view", unique=True, **{"fetch.wait.max.ms": 50})
        others = set(topics) - {r.topic for r in self.readers}
        know_topics(self.consumer, others)
        if self.fresh_consumer is not self.consumer:
            know_topics(self.fresh_consumer, others)

    @property
    def current(self) -> list[int]:
        """The replica each partition is read from."""
        return [r.replica for r in self.readers]

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
        for r, v in zip(self.readers, self.views, strict=True):
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
        if self.fresh_consumer is not self.consumer and any(r.fresh is not None for r in readers):
            msgs = self.fresh_consumer.consume(max_messages, 0)  # new tuples first, not behind corrections
        msgs += self.consumer.consume(max_messages, 0 if msgs else timeout)
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
        for reader in readers:
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
