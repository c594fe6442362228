"""SUnion: deterministic serialization of a node's input streams (Borealis DPC).

Tuples are placed in buckets of ``bucket_ms`` by tuple time (stime). Each input promises,
with BOUNDARY tuples, that no later tuple will have a smaller stime. A bucket is *stable*
once every input's boundary has passed its end and it holds no tentative tuple; stable
buckets leave in order, sorted by (stime, input, id), so every replica emits the same
sequence whatever the arrival interleaving.

When an input fails, a bucket cannot become stable. SUnion then holds tuples at most
``delay_s`` (the node's share of the delay bound) after the first one entered a bucket,
and emits the bucket as TENTATIVE; under the "delay" policy, which holds every bucket
again at every node of a path, the wait is ``hold_s``. With the "process" policy, a bucket that can
only be tentative (the node is already in failure, or the bucket holds tentative input,
whose upstream has already spent its wait) goes out as soon as every live input has
passed it; an input is live while its boundary (or, for tentative input, its tuple
times) advanced within ``delay_s``. From the first tentative bucket until
reconciliation, every emitted bucket is TENTATIVE (it is processed on tentative state) and
kept, since the node will roll back to before the failure and redo them: tuples that arrive
late for them (the failed input's, once it heals) are added, and an UNDO on an input
removes that input's undone tentative tuples. Once kept buckets have become stable, from
the first on, ``redo()`` gives their stable serialization; an input that failed again
meanwhile leaves the later ones kept, so a flapping input still lets the node reconcile
what is settled.

A node with one input (``in_order``) needs no serialization across inputs: Kafka gives every
replica that input's tuples in the same order, so its serialization is that order. Its stable
tuples go out at once while the node is not in a failure, before any boundary passes their
bucket, and later ones of the same bucket go out after them. A tuple whose time is below the
newest stable one's takes that one's bucket, so no bucket ever reorders the input, on the way
out, in a tentative bucket or in redo. Boundaries still drive the operators' time, the output
BOUNDARY and failure handling. docs/dpc.md says why every replica stays identical.

Inputs are Kafka logs, so stable tuples need not be buffered for checkpoint/redo: a node
replays them by seeking back to the offsets recorded with its checkpoint. The same holds
for the failure's input: once the kept buckets hold more than ``max_kept`` tuples, SUnion
drops their tuples and keeps only the range they span (the failure is *spilled*). It
still knows when that range has settled (every input's boundary past it); the node then
reconciles by going back to its state at the failure's start (``rewind``) and reading its
inputs again from there, so memory stays bounded however long the failure lasts.

A bucket leaves SUnion only once the caller has processed it (``buckets`` hands them out
one at a time), and kept buckets only once their redo is done: a node that dies halfway
has lost nothing its restart needs. A bucket emptied by an UNDO or a switch is dropped,
not emitted: only tuples make a node tentative. Its corrections, the same data, wait only
what was left of its wait, since the delay bound counts from when the data first came.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from services.core.tuples import NO_TIME, STABLE, TENTATIVE, TupleType
from services.spec.policies import FAILURE_POLICIES, Policy


@dataclass(slots=True)
class STuple:
    """One serialized tuple: its type, which input it came from, its id there, time and record;
    a tentative one also its t_max (from its ``ht`` header)."""

    type: TupleType
    port: int
    id: int
    stime: int
    rec: Any
    tmax: int = NO_TIME

    def order(self) -> tuple[int, int, int]:
        return (self.stime, self.port, self.id)


@dataclass
class Bucket:
    first_arrival: float
    tuples: list[STuple] = field(default_factory=list)

    def clean(self) -> bool:
        return all(t.type is STABLE for t in self.tuples)


# One bucket on its way out: its index, its label and its tuples (copies carrying the label).
Ready = tuple[int, TupleType, list[STuple]]


@dataclass
class SUnionState:
    """SUnion's state in a restart image: input promises, buckets not yet emitted, buckets kept for redo.

    Only tuple times, never local clock readings: a restart (maybe on another host) counts
    waits and liveness afresh from when it restores.
    """

    boundaries: list[int | None]
    pending: dict[int, list[STuple]]
    emitted_below: int | None
    kept: dict[int, list[STuple]]
    progress: list[int | None]
    high: int = NO_TIME  # an in-order input's newest stable stime


class SUnion:
    """``policy`` is what happens to new tuples once the node is in failure: "delay" holds
    every bucket up to ``delay_s`` (fewer tentative tuples), "process" emits each bucket as
    soon as the live inputs have passed it (lowest delay). A node's first tentative bucket
    of stable input always waits ``delay_s``, since blocking is best for failures shorter
    than that; tentative input is not held again under "process", so a chain adds the
    wait once, not once per node."""

    def __init__(
        self,
        inputs: int,
        bucket_ms: int,
        delay_s: float,
        policy: str = Policy.PROCESS,
        max_kept: int | None = None,
        hold_s: float | None = None,
        in_order: bool = False,
    ) -> None:
        if inputs < 1 or bucket_ms < 1 or delay_s < 0 or (max_kept is not None and max_kept < 0):
            raise ValueError("SUnion needs >= 1 input, bucket_ms >= 1, delay_s >= 0 and max_kept >= 0")
        if in_order and inputs != 1:
            raise ValueError("only a SUnion of one input can keep that input's order")
        if policy not in FAILURE_POLICIES:
            raise ValueError(f"SUnion policy must be 'process' or 'delay', got {policy!r}")
        self.inputs, self.bucket_ms, self.delay_s = inputs, bucket_ms, delay_s
        # Under "delay" every node of a path holds each bucket again, so each gets a smaller share.
        self.hold_s = delay_s if hold_s is None else hold_s
        self.policy = Policy(policy)
        self.boundaries: list[int | None] = [None] * inputs
        self.pending: dict[int, Bucket] = {}  # bucket index -> tuples not yet emitted
        self.emitted_below: int | None = None  # buckets below this index have been emitted or passed
        self.kept: dict[int, Bucket] = {}  # emitted since the first tentative bucket: to redo
        self.max_kept = max_kept  # more kept tuples than this: spill (None: no bound)
        self.kept_tuples = 0  # tuples in kept buckets
        self.peak_kept = 0  # the most kept tuples at any time
        self.spilled_from: int | None = None  # first bucket of a spilled failure: its tuples were dropped
        self.rejected: list[STuple] = []  # stime below their input's boundary: dead-letter them
        self.progress: list[int | None] = [None] * inputs  # boundary, or newest tentative stime
        self.progressed_at: list[float | None] = [None] * inputs  # when progress last moved
        self._settled: tuple[int | None, float] = (None, 0.0)  # the last settled kept bucket, and since when
        # When the tuples of buckets an UNDO emptied first came: their corrections are the same data,
        # so they wait only what is left of the wait (the delay bound counts from the first arrival).
        self.emptied: dict[int, float] = {}
        self.in_order = in_order
        self.high = NO_TIME  # in_order: the newest stable stime; no later tuple takes an earlier bucket

    # -- restart image ----------------------------------------------------------
    def state(self) -> SUnionState:
        """What a restart needs to serialize the rest of the input exactly as before the crash."""
        return SUnionState(
            list(self.boundaries),
            {k: list(b.tuples) for k, b in self.pending.items()},
            self.emitted_below,
            {k: list(b.tuples) for k, b in self.kept.items()},
            list(self.progress),
            self.high,
        )

    def restore(self, st: SUnionState, now: float) -> None:
        """Continue from a ``state()`` of a SUnion with the same inputs and buckets; ``now`` restarts every wait."""
        if len(st.boundaries) != self.inputs:
            raise ValueError(f"SUnion state has {len(st.boundaries)} inputs, this SUnion {self.inputs}")
        self.boundaries, self.emitted_below, self.progress = list(st.boundaries), st.emitted_below, list(st.progress)
        self.high = st.high
        self.pending = {k: Bucket(now, list(ts)) for k, ts in st.pending.items()}
        self.kept = {k: Bucket(now, list(ts)) for k, ts in st.kept.items()}
        self.progressed_at = [None if p is None else now for p in self.progress]
        self.rejected, self.emptied = [], {}
        self.spilled_from, self._settled = None, (None, 0.0)
        self._count_kept()

    def rewind(self, st: SUnionState, now: float) -> None:
        """Back to ``st``, taken when a failure began, to serialize that failure's input again
        as every port reads it anew right after the last stable tuple it had then: buckets
        kept then are pending again, and tentative tuples go (their inputs are read again)."""
        self.restore(st, now)
        if self.kept:
            first = min(self.kept)
            self.emitted_below = first if self.emitted_below is None else min(self.emitted_below, first)
            for k, b in self.kept.items():
                self.pending.setdefault(k, Bucket(now)).tuples.extend(b.tuples)
            self.kept = {}
            self._count_kept()
        for b in self.pending.values():
            b.tuples = [t for t in b.tuples if t.type is STABLE]

    def oldest_ids(self) -> dict[int, int]:
        """Per input port, the smallest id among the tuples it holds not yet emitted (ports holding none are absent)."""
        out: dict[int, int] = {}
        for b in self.pending.values():
            for t in b.tuples:
                if t.id < out.get(t.port, t.id + 1):
                    out[t.port] = t.id
        return out

    # -- input ----------------------------------------------------------------
    def push(
        self, port: int, ttype: TupleType, tid: int, stime: int, rec: Any, now: float, tmax: int = NO_TIME
    ) -> None:
        """A data tuple (STABLE or TENTATIVE, with its t_max) from input ``port``."""
        t = STuple(ttype, port, tid, stime, rec, tmax)
        if ttype is TENTATIVE:  # tentative input sends no boundaries: its tuple times are its progress
            self._progressed(port, stime, now)
        promised = self.boundaries[port]
        if promised is not None and stime < promised:
            self.rejected.append(t)  # the input broke its boundary promise
            return
        k = stime // self.bucket_ms
        if self.in_order:
            high = self.high
            if stime < high:
                k = high // self.bucket_ms  # behind an earlier tuple: its bucket, so the input's order holds
            elif ttype is STABLE:
                self.high = stime
        if self.emitted_below is not None and k < self.emitted_below:
            # A bucket already passed without this input (emitted tentatively, or skipped
            # while empty): the tuple is part of its correction, unless the failure spilled
            # (the node will read it again from the log).
            if self.spilled_from is None:
                kept = self.kept.get(k)
                if kept is None:
                    kept = self.kept[k] = Bucket(now)
                kept.tuples.append(t)
                self._kept_more(1)
            return
        b = self.pending.get(k)
        if b is None:
            b = self.pending[k] = Bucket(self.emptied.pop(k, now))
        b.tuples.append(t)

    def boundary(self, port: int, stime: int, now: float | None = None) -> None:
        """Input ``port`` will send no tuple with a smaller stime."""
        cur = self.boundaries[port]
        if cur is None or stime > cur:
            self.boundaries[port] = stime
            if now is not None:
                self._progressed(port, stime, now)

    def _progressed(self, port: int, stime: int, now: float) -> None:
        cur = self.progress[port]
        if cur is None or stime > cur:
            self.progress[port] = stime
            self.progressed_at[port] = now

    def _passed(self, k: int, now: float) -> bool:
        """Every live input has gone past bucket ``k``; silent ones (failed) are not waited for."""
        end = (k + 1) * self.bucket_ms
        for p, at in zip(self.progress, self.progressed_at, strict=True):
            if at is not None and now - at < self.delay_s and (p is None or p < end):
                return False
        return True

    def undo(self, port: int, pending: bool = True, kept: bool = True) -> None:
        """Input ``port`` undid its tentative tuples (UNDO, or a switch to another replica):
        drop them; stable corrections follow. Stable tuples are never undone.

        A replica read for its corrections while another supplies new tentative tuples
        undoes in two steps: those not processed yet go when the other replica takes over
        (``kept=False``), those processed (kept) with its UNDO (``pending=False``), when the
        ones not processed yet are the other replica's."""
        for buckets in (self.pending,) * pending + (self.kept,) * kept:
            for b in buckets.values():
                b.tuples = [t for t in b.tuples if t.port != port or t.type is STABLE]
        self._count_kept()

    # -- output ---------------------------------------------------------------
    def _complete(self, k: int) -> bool:
        end = (k + 1) * self.bucket_ms
        return all(b is not None and b >= end for b in self.boundaries)

    def buckets(self, now: float) -> Iterator[Ready]:
        """The buckets ready to process, in order, labelled STABLE or TENTATIVE.

        Each bucket leaves SUnion when the caller asks for the next one (or the iteration
        ends), so one the caller did not finish processing stays.
        """
        if not self.pending:
            return
        keys = sorted(self.pending)
        if self.in_order and len(keys) > 1 and not self.in_failure():
            pending = self.pending
            if all(pending[k].tuples and pending[k].clean() for k in keys):
                # All stable, in order: one run through the operators rather than one per bucket.
                yield keys[0], STABLE, [t for k in keys for t in pending[k].tuples]
                pending.clear()
                last = keys[-1]
                self._passed_up_to(last + 1 if self._complete(last) else last)
                return
        # The last bucket holding a tuple that has waited its full delay: everything up to
        # it must go now, tentatively if not stable.
        process = self.policy is Policy.PROCESS
        wait = self.delay_s if process else self.hold_s
        due = max((k for k in keys if now - self.pending[k].first_arrival >= wait), default=None)
        for k in keys:
            b = self.pending[k]
            if not b.tuples:  # emptied by an UNDO or a switch: nothing to emit or to redo
                self.emptied[k] = b.first_arrival  # a refilled bucket took it over from ``emptied``
                del self.pending[k]
                continue
            failed = self.in_failure()
            complete = self._complete(k)
            passed = k + 1
            if (complete or self.in_order) and b.clean() and not failed:
                label = STABLE
                if not complete:
                    passed = k  # in order, at once: the rest of the bucket follows
            elif (due is not None and k <= due) or (process and (failed or not b.clean()) and self._passed(k, now)):
                label = TENTATIVE  # overdue, or can only be tentative and need not wait
            else:
                break
            if not self.in_order:
                b.tuples.sort(key=STuple.order)
            if label is STABLE:  # all stable already, and the bucket is not kept: no copies
                yield k, label, b.tuples
            else:
                yield k, label, [STuple(label, t.port, t.id, t.stime, t.rec, t.tmax) for t in b.tuples]
            del self.pending[k]
            if label is TENTATIVE and self.spilled_from is None:
                self.kept[k] = b  # the caller got copies, so later corrections only change b
                self._kept_more(len(b.tuples))
            self._passed_up_to(passed)

    def _passed_up_to(self, k: int) -> None:
        """Buckets below ``k`` have gone out (or were skipped)."""
        self.emitted_below = k if self.emitted_below is None else max(self.emitted_below, k)
        if self.emptied:
            self.emptied = {e: at for e, at in self.emptied.items() if e >= self.emitted_below}

    def poll(self, now: float) -> list[STuple]:
        """Every ready tuple at once (``buckets``, flattened)."""
        return [t for _, _, ts in self.buckets(now) for t in ts]

    def frontier(self) -> int | None:
        """Every tuple with a smaller stime has been emitted STABLE: the node's output boundary.

        None while nothing is known (an input never sent a boundary). It stays below the
        first kept bucket while in failure, since corrections of the tentative buckets are
        still to come; a reconciliation of the settled ones moves it up to the first that
        is not settled.
        """
        known = [b for b in self.boundaries if b is not None]
        if len(known) < self.inputs:
            return None
        f = min(known)
        for held in (self.pending, self.kept):
            if held:
                f = min(f, min(held) * self.bucket_ms)
        if self.spilled_from is not None:
            f = min(f, self.spilled_from * self.bucket_ms)
        return (f // self.bucket_ms) * self.bucket_ms

    # -- reconciliation -------------------------------------------------------
    def in_failure(self) -> bool:
        """Some emitted bucket was tentative and has not been reconciled yet."""
        return bool(self.kept) or self.spilled_from is not None

    @property
    def spilled(self) -> bool:
        """The failure's tuples were dropped for ``max_kept``: it is reconciled by reading the inputs again."""
        return self.spilled_from is not None

    def _kept_more(self, n: int) -> None:
        self.kept_tuples += n
        if self.max_kept is not None and self.kept_tuples > self.max_kept:
            self.spilled_from = min(self.kept)
            self.kept, self.kept_tuples = {}, 0
        if self.kept_tuples > self.peak_kept:
            self.peak_kept = self.kept_tuples

    def _count_kept(self) -> None:
        self.kept_tuples = sum(len(b.tuples) for b in self.kept.values())
        self.peak_kept = max(self.peak_kept, self.kept_tuples)

    def settled(self) -> list[int]:
        """The kept buckets whose stable version is known, from the first one on up to the
        first that is not (incomplete, or still holding tentative input): what can be
        reconciled now. A failure that came back before the last one was reconciled leaves
        its buckets after these. A spilled failure has no kept buckets (``settled_upto``)."""
        out = []
        for k in sorted(self.kept):
            if not (self._complete(k) and self.kept[k].clean()):
                break
            out.append(k)
        return out

    def settled_upto(self) -> tuple[int | None, bool]:
        """The last bucket of the failure whose stable version is known, counting from the
        failure's first bucket (None: not even that one), and whether every bucket emitted
        tentatively is. A spilled failure's bucket is known once every input's boundary has
        passed it: an input's stable tuples replace its tentative ones before its boundary."""
        if self.spilled_from is not None:
            end = self.emitted_below if self.emitted_below is not None else self.spilled_from
            known = [b for b in self.boundaries if b is not None]
            below = min(known) // self.bucket_ms if len(known) == self.inputs else self.spilled_from
            below = min(below, end)
            return (below - 1 if below > self.spilled_from else None), below >= end
        done = self.settled()
        return (done[-1] if done else None), bool(done) and len(done) == len(self.kept)

    def can_reconcile(self) -> bool:
        """Every kept bucket is now complete and clean: its stable version is known."""
        return self.in_failure() and self.settled_upto()[1]

    def ready_to_reconcile(self, now: float) -> bool:
        """Reconcile now: every kept bucket is settled, or some are and no more have settled for
        ``delay_s`` (an input failed again before the rest could). While corrections keep
        arriving, the node waits for them rather than reconcile piece by piece."""
        last, everything = self.settled_upto()
        if last != self._settled[0]:
            self._settled = (last, now)
        if last is None:
            return False
        return everything or now - self._settled[1] >= self.delay_s

    def redo_buckets(self) -> Iterator[Ready]:
        """The stable version of every settled kept bucket, in order; they are forgotten once
        all are processed. Kept buckets that are not settled stay kept."""
        done = self.settled()
        for k in done:
            yield self._kept_as(k, STABLE)
        for k in done:
            del self.kept[k]
        self._count_kept()

    def rerun_buckets(self) -> Iterator[Ready]:
        """The kept buckets, tentatively again, after a reconciliation of the settled ones:
        the node is still in the failure they belong to; they stay kept."""
        for k in sorted(self.kept):
            yield self._kept_as(k, TENTATIVE)

    def _kept_as(self, k: int, label: TupleType) -> Ready:
        """Kept bucket ``k`` in serialization order, as copies carrying ``label``."""
        return (
            k,
            label,
            [
                STuple(label, t.port, t.id, t.stime, t.rec, t.tmax)
                for t in (self.kept[k].tuples if self.in_order else sorted(self.kept[k].tuples, key=STuple.order))
            ],
        )

    def redo(self) -> list[STuple]:
        """Every settled kept bucket's stable tuples at once (``redo_buckets``, flattened)."""
        return [t for _, _, ts in self.redo_buckets() for t in ts]
