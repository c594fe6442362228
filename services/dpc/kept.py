"""What SUnion keeps of a failure for its redo: the buckets it emitted tentatively.

From the first tentative bucket until reconciliation, every bucket SUnion emits is kept,
since the node will roll back to before the failure and redo them: tuples that arrive late
for them (the failed input's, once it heals) are added. Once kept buckets have become
stable, from the first on, ``redo_buckets`` gives their stable serialization; an input that
failed again meanwhile leaves the later ones kept (``rerun_buckets`` gives them tentatively
again), so a flapping input still lets the node reconcile what is settled.

Inputs are Kafka logs, so stable tuples need not be buffered for checkpoint/redo: a node
replays them by seeking back to the offsets recorded with its checkpoint. The same holds
for the failure's input: once the kept buckets hold more than ``max_kept`` tuples, SUnion
drops their tuples and keeps only the range they span (the failure is *spilled*). It
still knows when that range has settled (every input's boundary past it); the node then
reconciles by going back to its state at the failure's start (``rewind``) and reading its
inputs again from there, so memory stays bounded however long the failure lasts.

Its own module so SUnion (``services.dpc.sunion``) holds it by composition: SUnion knows
the inputs' boundaries and passes what they settle (``complete_below``: every bucket below
it has every input's boundary past its end, None while some input sent none).
"""

from __future__ import annotations

from typing import Iterator

from services.core.tuples import STABLE, TENTATIVE, TupleType
from services.dpc.buckets import Bucket, Ready, STuple


class Kept:
    """The kept buckets of a failure (or, spilled, the range they span) and when they settled."""

    def __init__(self, max_kept: int | None, in_order: bool) -> None:
        self.buckets: dict[int, Bucket] = {}  # emitted since the first tentative bucket: to redo
        self.max_kept = max_kept  # more kept tuples than this: spill (None: no bound)
        self.tuples = 0  # tuples in kept buckets
        self.peak = 0  # the most kept tuples at any time
        self.spilled_from: int | None = None  # first bucket of a spilled failure: its tuples were dropped
        self.in_order = in_order  # one input in its log order: the redo keeps that order rather than sort
        self._settled: tuple[int | None, float] = (None, 0.0)  # the last settled kept bucket, and since when

    def active(self) -> bool:
        """Some emitted bucket was tentative and has not been reconciled yet."""
        return bool(self.buckets) or self.spilled_from is not None

    def first(self) -> int | None:
        """The failure's first bucket (None: no failure); SUnion's stable frontier stays below it."""
        return min(self.buckets) if self.buckets else self.spilled_from

    # -- keeping ----------------------------------------------------------------
    def keep(self, k: int, b: Bucket) -> None:
        """Bucket ``k`` went out tentatively: keep it, unless the failure spilled."""
        if self.spilled_from is None:
            self.buckets[k] = b  # the caller got copies, so later corrections only change b
            self.tuples += len(b.tuples)
            if self.max_kept is not None and self.tuples > self.max_kept:
                self._spill()
            elif self.tuples > self.peak:
                self.peak = self.tuples

    def add(self, k: int, t: STuple, now: float) -> None:
        """A tuple late for bucket ``k``, which already went out: part of its correction,
        unless the failure spilled (the node will read it again from the log)."""
        if self.spilled_from is None:
            kept = self.buckets.get(k)
            if kept is None:
                kept = self.buckets[k] = Bucket(now)
            kept.tuples.append(t)
            # As in ``keep``, written out here: this runs once per late tuple.
            self.tuples += 1
            if self.max_kept is not None and self.tuples > self.max_kept:
                self._spill()
            elif self.tuples > self.peak:
                self.peak = self.tuples

    def _spill(self) -> None:
        """Past ``max_kept``: drop the tuples, keep the range from the first bucket on."""
        self.spilled_from = min(self.buckets)
        self.buckets, self.tuples = {}, 0

    def count(self) -> None:
        """Count the kept tuples again, after an UNDO or a restore changed them wholesale."""
        self.tuples = sum(len(b.tuples) for b in self.buckets.values())
        self.peak = max(self.peak, self.tuples)

    # -- restart image ----------------------------------------------------------
    def state(self) -> dict[int, list[STuple]]:
        """The kept buckets' tuples, for SUnion's restart image."""
        return {k: list(b.tuples) for k, b in self.buckets.items()}

    def restore(self, kept: dict[int, list[STuple]], now: float) -> None:
        """Keep ``kept`` (a ``state()``) as a failure not spilled; ``now`` restarts every wait."""
        self.buckets = {k: Bucket(now, list(ts)) for k, ts in kept.items()}
        self.spilled_from, self._settled = None, (None, 0.0)
        self.count()

    def take(self) -> dict[int, Bucket]:
        """The kept buckets, kept no more: a rewind serializes them again."""
        out, self.buckets = self.buckets, {}
        self.count()
        return out

    # -- reconciliation -------------------------------------------------------
    def settled(self, complete_below: int | None) -> list[int]:
        """The kept buckets whose stable version is known, from the first one on up to the
        first that is not (incomplete, or still holding tentative input): what can be
        reconciled now. A failure that came back before the last one was reconciled leaves
        its buckets after these. A spilled failure has no kept buckets (``settled_upto``)."""
        out = []
        for k in sorted(self.buckets):
            if complete_below is None or k >= complete_below or not self.buckets[k].clean():
                break
            out.append(k)
        return out

    def settled_upto(self, complete_below: int | None, emitted_below: int | None) -> tuple[int | None, bool]:
        """The last bucket of the failure whose stable version is known, counting from the
        failure's first bucket (None: not even that one), and whether every bucket emitted
        tentatively is. A spilled failure's bucket is known once every input's boundary has
        passed it: an input's stable tuples replace its tentative ones before its boundary."""
        if self.spilled_from is not None:
            end = emitted_below if emitted_below is not None else self.spilled_from
            below = complete_below if complete_below is not None else self.spilled_from
            below = min(below, end)
            return (below - 1 if below > self.spilled_from else None), below >= end
        done = self.settled(complete_below)
        return (done[-1] if done else None), bool(done) and len(done) == len(self.buckets)

    def ready(self, now: float, wait: float, complete_below: int | None, emitted_below: int | None) -> bool:
        """Reconcile now: every kept bucket is settled, or some are and no more have settled for
        ``wait`` (an input failed again before the rest could). While corrections keep
        arriving, the node waits for them rather than reconcile piece by piece."""
        last, everything = self.settled_upto(complete_below, emitted_below)
        if last != self._settled[0]:
            self._settled = (last, now)
        if last is None:
            return False
        return everything or now - self._settled[1] >= wait

    def redo_buckets(self, complete_below: int | None) -> Iterator[Ready]:
        """The stable version of every settled kept bucket, in order; they are forgotten once
        all are processed. Kept buckets that are not settled stay kept."""
        done = self.settled(complete_below)
        for k in done:
            yield self._as(k, STABLE)
        for k in done:
            del self.buckets[k]
        self.count()

    def rerun_buckets(self) -> Iterator[Ready]:
        """The kept buckets, tentatively again, after a reconciliation of the settled ones:
        the node is still in the failure they belong to; they stay kept."""
        for k in sorted(self.buckets):
            yield self._as(k, TENTATIVE)

    def _as(self, k: int, label: TupleType) -> Ready:
        """Kept bucket ``k`` in serialization order, as copies carrying ``label``."""
        tuples = self.buckets[k].tuples
        return (
            k,
            label,
            [t.labeled(label) for t in (tuples if self.in_order else sorted(tuples, key=STuple.order))],
        )
