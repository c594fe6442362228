"""One partition of a stream as a client sees it under DPC: the Kafka-free core of ``StreamView``.

Contract (per partition): STABLE ids are dense (0, 1, ...) and the same on every replica;
TENTATIVE ids continue after the last stable id; UNDO(L) voids every tentative tuple (L is
the last stable id not undone) and the stable corrections L+1, ... follow; REC_DONE(L) ends
a reconciliation; BOUNDARY(stime B) promises no later tuple has stime < B; a stable tuple
with an id at or below the last stable id is a duplicate (after a restart or a switch); a
message with a lower epoch than one already read comes from a replaced copy of the
writer and is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from services.core.tuples import (
    BOUNDARY,
    REC_DONE,
    STABLE,
    TENTATIVE,
    UNDO,
    EpochGate,
    RawHeaders,
    TupleType,
)
from services.dpc import contract
from services.dpc.switching import Move

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
        verdict, got, tm = contract.judge(self, headers, fresh, not self.started)
        if got is None:
            self.fenced += 1
            return None
        ttype, tid, stime, carried = got
        self.apply(ttype, tid, stime, payload, out, replica, offset, tm, fresh, verdict)
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
        verdict: contract.Verdict | None = None,
    ) -> None:
        """Apply one message; append the resulting events (if any) to ``out``. ``tmax``: a tentative
        tuple's t_max; ``fresh``: it comes from the replica read for new tuples only; ``verdict``:
        the reader contract's (``services.dpc.contract``), if judged already."""
        r = self.replica if replica is None else replica
        if self.gap is not None:
            return  # the rest comes again, from where the missing ids are read
        if ttype is STABLE:
            verdict = verdict or contract.stable(self, tid, not self.started)
            if verdict is contract.Verdict.DUPLICATE:
                self.duplicates += 1
                return
            if verdict is contract.Verdict.GAP:
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
            verdict = verdict or contract.tentative(self, tid, tmax, fresh)
            self._tentative(tid, stime, payload, out, r, offset, tmax, verdict)
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
        verdict: contract.Verdict,
    ) -> None:
        if not self.track_tentative:
            return
        if verdict is not contract.Verdict.NEW:
            # From a reconciling replica while a fresh one supplies new tuples, replaced by stable
            # tuples already, or held already from the replica read before a switch.
            self.repeats += verdict is contract.Verdict.HELD
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
