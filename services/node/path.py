"""The stable path every scheme runs its input through: merge, operators, numbering.

SUnion's buckets (or the tuples of one input in order that went past it, ``direct``) run through
the operators run by run of one input; the operators' time moves to each bucket's start first, so
what a window closes there comes out before the bucket's tuples whether or not the previous
bucket came in the same poll: the output order depends on the input alone, on every replica and
in a redo. SOutput numbers the results and queues them on the node's outputs, the operators'
time follows SUnion's stable frontier, and a BOUNDARY at that time (or below the first result an
operator still holds) tells downstream.

What differs between schemes is given, not overridden:

- ``failed`` (DPC's upstream failure): results are tentative, time and boundaries stand still;
  ``on_tentative`` runs before a tentative bucket (DPC remembers its pre-failure state there);
- ``at_bucket_starts`` (the HA schemes): time moves to bucket starts only, so a cut taken right
  after the operators reached one splits the output at the same place in every run of the same
  input; ``resume_at`` is a takeover's cut, on the way to which the operators stop and before
  which every result is dropped (written already, or missing the input before the cut);
- ``on_bucket`` sees each bucket before it runs, ``on_step`` each bucket start reached;
- ``checkpointed``: a store that records the stable processing itself (CEC's output log): the input
  goes to it with each run's first input id (``first_id``), and it queues the results; it is paused
  while the node is ``failed``, and given the loop's time after each step (its background checkpoints).
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol

from services.core.tuples import NO_TIME, STABLE, TENTATIVE, TupleType
from services.dpc.buckets import STuple
from services.dpc.soutput import SOutput
from services.dpc.sunion import SUnion
from services.exchange.route import checked
from services.node.scheme import NodeRuntime
from services.operators.base import Emit, Item, _ignore
from services.spec.plan import InputPlan

log = logging.getLogger(__name__)

Bucket = Callable[[int, list[STuple]], None]


class Checkpointed(Protocol):
    """A store that records the stable processing itself (``services.cec.store``)."""

    def collect(self) -> None:
        """Queue on the output what the stable processing made since the last call."""

    def pause(self) -> None:
        """An upstream failure begins: the operators run tentatively, unrecorded."""

    def resume(self) -> None:
        """It is over: the operators are back where ``pause`` found them."""

    def background(self, now: float) -> None:
        """Between batches: checkpoints due by the loop's clock (``now``, monotonic s)."""


def _nothing(*_: object) -> None:
    return None


def _entry(node: NodeRuntime, i: InputPlan) -> Emit:
    """Where input ``i``'s tuples go: its operators, past the exchange's check on a connection."""
    emit, pipeline = node.pipeline.entry(i.operand), node.pipeline
    if i.route is None:
        return emit
    where = f"exchange {i.stream}"
    return checked(emit, i.route, i.fanout, node.partition, lambda it, why: pipeline.reject(where, it, why))


class StablePath:
    """SUnion → operators → SOutput for one node replica partition (see the module's docstring)."""

    def __init__(
        self,
        node: NodeRuntime,
        sunion: SUnion,
        soutputs: dict[str, SOutput],
        at_bucket_starts: bool = False,
    ) -> None:
        self.node, self.sunion, self.soutputs = node, sunion, soutputs
        self.bucket = node.plan.dpc.bucket
        self.at_bucket_starts = at_bucket_starts
        self.entries = [_entry(node, i) for i in node.plan.inputs]
        self.direct: list[Item] = []  # (record, stime) of stable tuples taken past SUnion in this batch
        self.direct_first = 0  # the input id of its first
        self.first_id = 0  # the input id of the first tuple of the run being pushed
        self._failed = False
        self.checkpointed: Checkpointed | None = None
        self.advanced: int | None = None  # the last frontier sent downstream as a BOUNDARY
        self.op_time: int | None = None  # the operators' time: the last advance()
        self.t_in = NO_TIME  # tuple time of the last input tuple processed: tentative results' t_max
        self.resume_at: int | None = None  # a takeover's cut (``at_bucket_starts`` only)
        self.on_tentative: Callable[[list[STuple]], None] = _nothing
        self.on_bucket: Bucket = _nothing
        self.on_step: Callable[[int], None] = _nothing

    @property
    def failed(self) -> bool:
        """In an upstream failure: processing tentative input (DPC)."""
        return self._failed

    @failed.setter
    def failed(self, failed: bool) -> None:
        cp = self.checkpointed
        if cp is not None and failed != self._failed:
            cp.pause() if failed else cp.resume()
        self._failed = failed

    @property
    def merge(self) -> SUnion:
        """Where the intake hands admitted tuples (``services.node.merge.Ordering``): SUnion's time merge."""
        return self.sunion

    def step(self, now: float) -> None:
        """Run what is ready, move the operators' time on, flush what is due."""
        if self.direct:
            self.run_direct()
        for bucket in self.sunion.buckets(now):
            self.run(*bucket)
        self.advance()
        if self.node.pipeline.due(now):
            self.flush()
        if self.checkpointed is not None and not self._failed:
            self.checkpointed.background(now)

    def run_direct(self) -> None:
        """The stable tuples of one input in order that went past SUnion (nothing was pending before
        them and the node is not in a failure): one run, as SUnion would give them."""
        items, self.direct = self.direct, []
        self.advance_operators(items[0][1] // self.bucket * self.bucket, STABLE)
        self.first_id = self.direct_first
        self.entries[0](items)
        self.t_in = items[-1][1]
        self.collect(STABLE)

    def run(self, k: int, label: TupleType, tuples: list[STuple]) -> None:
        """Push bucket ``k`` through the operators, run by run of one input, time at its start first."""
        if label is TENTATIVE:
            self.on_tentative(tuples)
        self.on_bucket(k, tuples)
        self.advance_operators(k * self.bucket, label)
        i, n, entries = 0, len(tuples), self.entries
        stable = label is STABLE  # its results need no t_max: collected once, in the order they came
        while i < n:
            port = tuples[i].port
            j = i
            items = []
            while j < n and tuples[j].port == port:
                t = tuples[j]
                items.append((t.rec, t.stime))
                j += 1
            self.first_id = tuples[i].id
            entries[port](items)
            self.t_in = tuples[j - 1].stime
            if not stable:
                self.collect(label)
            i = j
        if stable:
            self.collect(label)

    def advance_operators(self, t: int, label: TupleType) -> None:
        """The operators' time to ``t`` (at bucket starts: the one at or before it, stopping at a
        takeover's cut on the way: where a cut was taken the replay of the same input stops too)."""
        if self.at_bucket_starts:
            t -= t % self.bucket
            cut = self.resume_at
            if cut is not None and (self.op_time is None or self.op_time < cut) and cut < t:
                self._step_to(cut, label)
        if self.op_time is None or t > self.op_time:
            self._step_to(t, label)

    def _step_to(self, t: int, label: TupleType) -> None:
        self.op_time = t
        self.node.pipeline.advance(t)
        self.collect(label)
        if self.at_bucket_starts:
            if self.resume_at is not None and t >= self.resume_at:
                self.resume_at = None  # the replay reached the cut: from here on its results are the log's
                log.info("replay reached the cut %d", t)
            else:
                self.on_step(t)

    def frontier(self) -> int | None:
        """The time the operators may advance to: SUnion's stable frontier (at bucket starts: the
        last one it has passed)."""
        f = self.sunion.frontier()
        if f is None or not self.at_bucket_starts:
            return f
        return f - f % self.bucket

    def advance(self) -> None:
        """Move operator time to the stable frontier and tell downstream with a BOUNDARY."""
        f = self.frontier()
        if f is None or self.failed or (self.advanced is not None and f <= self.advanced):
            return
        self.advanced = f
        self.advance_operators(f, STABLE)
        self.boundary()

    def boundary(self) -> None:
        """BOUNDARY at the operators' time, or below the first result an operator still holds."""
        if self.advanced is None or self.failed or self.resume_at is not None:
            return
        held = self.node.pipeline.held()
        b = self.advanced if held is None else min(self.advanced, held)
        queue = self.node.outputs.queue
        for s, so in self.soutputs.items():
            so.boundary(b, queue(s))

    def flush(self) -> None:
        """Emit what the operators hold (a Spark window's job), labelled as the processing that decided
        it: tentative while in a failure (what was decided before it was flushed on the way in)."""
        node = self.node
        if not node.pipeline.holders:
            return  # every operator emits at once
        node.pipeline.flush(node.tick)
        # When a result is flushed depends on the replica's timing, so its t_max is its own tuple
        # time (a window's end), which every replica gives it, not the input read by then.
        self.collect(TENTATIVE if self.failed else STABLE, own_tmax=True)
        self.boundary()

    def collect(self, label: TupleType, own_tmax: bool = False) -> None:
        """Number the operators' results and queue them; dead-letter the tuples they rejected.
        Tentative results carry the t_max of the input processed so far (``own_tmax``: their own time).

        Only stable processing rejects for good (the same tuples on every replica); a
        tentative rejection is redone, and rejected again if need be, on the stable input.
        Before a takeover's cut nothing is kept.
        """
        node = self.node
        pipeline, queue, outputs = node.pipeline, node.outputs.queue, node.outputs
        if self.resume_at is not None:
            pipeline.drain()
            pipeline.rejected.clear()
            return
        stable = label is STABLE
        if stable and self.checkpointed is not None:
            self.checkpointed.collect()
        reject = node.reject if stable else _ignore
        for s, items in pipeline.drain().items():
            so = self.soutputs[s]
            encoded = outputs.encode(s, items, reject)
            if stable:
                so.stable(encoded, queue(s))
            else:
                if own_tmax:
                    for one in encoded:
                        so.tentative([one], queue(s), one[1])
                else:
                    so.tentative(encoded, queue(s), self.t_in)
                node.stats.tentative += len(encoded)
        if pipeline.rejected:
            if stable:
                for op, item, why in pipeline.rejected:
                    node.reject(op, item, why)
                node.stats.rejected += len(pipeline.rejected)
            pipeline.rejected.clear()

    def deduplicating(self) -> bool:
        """An output still drops what a replay regenerates of its topic."""
        return any(so.deduplicating for so in self.soutputs.values())

    def progress(self) -> tuple[int, int]:
        """(stable tuples numbered, the last BOUNDARY sent or -1): what heartbeats report."""
        stable = sum(so.next_id for so in self.soutputs.values())
        return stable, -1 if self.advanced is None else self.advanced
