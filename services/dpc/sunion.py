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
kept for the redo (``services.dpc.kept``, which says what a failure keeps and how
``max_kept`` bounds it); an UNDO on an input removes that input's undone tentative tuples.

A node with one input (``in_order``) needs no serialization across inputs: Kafka gives every
replica that input's tuples in the same order, so its serialization is that order. Its stable
tuples go out at once while the node is not in a failure, before any boundary passes their
bucket, and later ones of the same bucket go out after them. A tuple whose time is below the
newest stable one's takes that one's bucket, so no bucket ever reorders the input, on the way
out, in a tentative bucket or in redo. Boundaries still drive the operators' time, the output
BOUNDARY and failure handling. docs/dpc.md says why every replica stays identical.

A bucket leaves SUnion only once the caller has processed it (``buckets`` hands them out
one at a time), and kept buckets only once their redo is done: a node that dies halfway
has lost nothing its restart needs. A bucket emptied by an UNDO or a switch is dropped,
not emitted: only tuples make a node tentative. Its corrections, the same data, wait only
what was left of its wait, since the delay bound counts from when the data first came.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from services.core.tuples import NO_TIME, STABLE, TENTATIVE, TupleType
from services.dpc.buckets import Bucket, Ready, STuple
from services.dpc.kept import Kept
from services.spec.policies import FAILURE_POLICIES, Policy


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
        early: bool = False,
        precise: bool = False,
    ) -> None:
        """``early``: release the stable tuples of a bucket that every input's boundary has passed
        before the whole bucket has (``_early``); ``precise``: its frontier in tuple time, not at bucket starts."""
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
        self.failure = Kept(max_kept, in_order)  # what it keeps of a failure for the redo
        self.rejected: list[STuple] = []  # stime below their input's boundary: dead-letter them
        self.progress: list[int | None] = [None] * inputs  # boundary, or newest tentative stime
        self.progressed_at: list[float | None] = [None] * inputs  # when progress last moved
        # When the tuples of buckets an UNDO emptied first came: their corrections are the same data,
        # so they wait only what is left of the wait (the delay bound counts from the first arrival).
        self.emptied: dict[int, float] = {}
        self.in_order, self.early, self.precise = in_order, early and not in_order, precise
        self.high = NO_TIME  # in_order: the newest stable stime; no later tuple takes an earlier bucket

    # -- restart image ----------------------------------------------------------
    def state(self) -> SUnionState:
        """What a restart needs to serialize the rest of the input exactly as before the crash."""
        return SUnionState(
            list(self.boundaries),
            {k: list(b.tuples) for k, b in self.pending.items()},
            self.emitted_below,
            self.failure.state(),
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
        self.failure.restore(st.kept, now)
        self.progressed_at = [None if p is None else now for p in self.progress]
        self.rejected, self.emptied = [], {}

    def rewind(self, st: SUnionState, now: float) -> None:
        """Back to ``st``, taken when a failure began, to serialize that failure's input again
        as every port reads it anew right after the last stable tuple it had then: buckets
        kept then are pending again, and tentative tuples go (their inputs are read again)."""
        self.restore(st, now)
        kept = self.failure.take()
        if kept:
            first = min(kept)
            self.emitted_below = first if self.emitted_below is None else min(self.emitted_below, first)
            for k, b in kept.items():
                self.pending.setdefault(k, Bucket(now)).tuples.extend(b.tuples)
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

    def push(
        self,
        port: int,
        ttype: TupleType,
        tid: int,
        stime: int,
        rec: Any,
        now: float,
        tmax: int = NO_TIME,
        offset: int = -1,
    ) -> None:
        """A data tuple (STABLE or TENTATIVE, with its t_max, and its input offset or -1) from input ``port``."""
        t = STuple(ttype, port, tid, stime, rec, tmax, offset)
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
            self.failure.add(k, t, now)
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
        for buckets in (self.pending,) * pending + (self.failure.buckets,) * kept:
            for b in buckets.values():
                b.tuples = [t for t in b.tuples if t.port != port or t.type is STABLE]
        self.failure.count()

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
        failure = self.failure
        if self.in_order and len(keys) > 1 and not failure.active():
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
            failed = failure.active()
            complete = self._complete(k)
            passed = k + 1
            if (complete or self.in_order) and b.clean() and not failed:
                label = STABLE
                if not complete:
                    passed = k  # in order, at once: the rest of the bucket follows
            elif (due is not None and k <= due) or (process and (failed or not b.clean()) and self._passed(k, now)):
                label = TENTATIVE  # overdue, or can only be tentative and need not wait
            else:
                if self.early and not failed and b.clean():
                    yield from self._early(k, b)
                break
            if not self.in_order:
                b.tuples.sort(key=STuple.order)
            if label is STABLE:  # all stable already, and the bucket is not kept: no copies
                yield k, label, b.tuples
            else:
                yield k, label, [t.labeled(label) for t in b.tuples]
            del self.pending[k]
            if label is TENTATIVE:
                failure.keep(k, b)
            self._passed_up_to(passed)

    def _early(self, k: int, b: Bucket) -> Iterator[Ready]:
        """Stable bucket ``k``'s tuples below every input's boundary, in order, now (none comes later below
        its input's boundary: the order is the whole bucket's); they leave once processed."""
        low = min((x for x in self.boundaries if x is not None), default=None)
        if low is None or None in self.boundaries or low <= k * self.bucket_ms:
            return
        ready = [t for t in b.tuples if t.stime < low]
        if not ready:
            return
        ready.sort(key=STuple.order)
        yield k, STABLE, ready
        b.tuples = [t for t in b.tuples if t.stime >= low]
        if not b.tuples:
            del self.pending[k]  # a tuple of it still to come waits afresh

    def _passed_up_to(self, k: int) -> None:
        """Buckets below ``k`` have gone out (or were skipped)."""
        self.emitted_below = k if self.emitted_below is None else max(self.emitted_below, k)
        if self.emptied:
            self.emptied = {e: at for e, at in self.emptied.items() if e >= self.emitted_below}

    def poll(self, now: float) -> list[STuple]:  # ``buckets``, flattened
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
        if self.pending and self.precise and self.early:  # what is not out yet: its first tuple, in its first bucket
            first = min((k for k, b in self.pending.items() if b.tuples), default=None)
            f = f if first is None else min([f] + [t.stime for t in self.pending[first].tuples])
        elif self.pending:
            f = min(f, min(self.pending) * self.bucket_ms)
        if (kept := self.failure.first()) is not None:
            f = min(f, kept * self.bucket_ms)
        return f if self.precise else (f // self.bucket_ms) * self.bucket_ms

    # -- reconciliation: what it keeps of a failure (``services.dpc.kept``) ------
    def in_failure(self) -> bool:
        """Some emitted bucket was tentative and has not been reconciled yet."""
        return self.failure.active()

    @property
    def spilled(self) -> bool:
        """The failure's tuples were dropped for ``max_kept``: it is reconciled by reading the inputs again."""
        return self.failure.spilled_from is not None

    @property
    def spilled_from(self) -> int | None:
        """The first bucket of a spilled failure (None: not spilled)."""
        return self.failure.spilled_from

    @property
    def kept(self) -> dict[int, Bucket]:  # the buckets kept for the redo, by index
        return self.failure.buckets

    @property
    def kept_tuples(self) -> int:  # the tuples in kept buckets
        return self.failure.tuples

    @property
    def peak_kept(self) -> int:  # the most kept tuples at any time
        return self.failure.peak

    @property
    def max_kept(self) -> int | None:  # more kept tuples than this spill the failure (None: no bound)
        return self.failure.max_kept

    @max_kept.setter
    def max_kept(self, n: int | None) -> None:
        self.failure.max_kept = n

    def _complete_below(self) -> int | None:
        """Every bucket below this index is complete, every input's boundary past its end
        (None: some input sent no boundary yet)."""
        known = [b for b in self.boundaries if b is not None]
        return min(known) // self.bucket_ms if len(known) == self.inputs else None

    def settled(self) -> list[int]:
        """The kept buckets whose stable version is known (``Kept.settled``)."""
        return self.failure.settled(self._complete_below())

    def settled_upto(self) -> tuple[int | None, bool]:
        """The last bucket of the failure whose stable version is known, and whether every
        bucket emitted tentatively is (``Kept.settled_upto``)."""
        return self.failure.settled_upto(self._complete_below(), self.emitted_below)

    def can_reconcile(self) -> bool:
        """Every kept bucket is now complete and clean: its stable version is known."""
        return self.in_failure() and self.settled_upto()[1]

    def ready_to_reconcile(self, now: float) -> bool:
        """Reconcile now: every kept bucket is settled, or some are and no more have settled for
        ``delay_s`` (``Kept.ready``)."""
        return self.failure.ready(now, self.delay_s, self._complete_below(), self.emitted_below)

    def redo_buckets(self) -> Iterator[Ready]:
        """The stable version of every settled kept bucket, in order; they are forgotten once
        all are processed. Kept buckets that are not settled stay kept."""
        yield from self.failure.redo_buckets(self._complete_below())

    def rerun_buckets(self) -> Iterator[Ready]:
        """The kept buckets, tentatively again, after a reconciliation of the settled ones:
        the node is still in the failure they belong to; they stay kept."""
        return self.failure.rerun_buckets()

    def redo(self) -> list[STuple]:  # ``redo_buckets``, flattened
        return [t for _, _, ts in self.redo_buckets() for t in ts]
