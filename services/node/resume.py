"""Resuming a node replica partition's output log from a recovery point: after a crash, or at a takeover.

The point (a restart image, or a passive standby's checkpoint) gives the operators' state, SUnion's,
the next output ids and where each input stands; the node reads its inputs again from there. What
that replay regenerates of each output's log is dropped, each tuple checked to be the very one the
log holds under its id (``SOutput.restarted``), so the log reads as if the node had never stopped;
under rollback recovery (``precise=False``) it is written again instead. A point that counts output
the log does not hold (written by a replaced copy) is not used; a replay whose input the logs no
longer hold is refused with one line, or the output would be renumbered.
"""

from __future__ import annotations

import logging
import time

from services.core.errors import RestartImageError
from services.dpc.soutput import SOutput
from services.log.logged import stable_after
from services.log.tail import first_offset, last_stable_id
from services.node import restart
from services.node.path import StablePath
from services.node.scheme import NodeRuntime
from services.node.state import StateStore

log = logging.getLogger(__name__)


class Resume:
    """Continues one node replica partition's outputs from a recovery point (see the module's docstring)."""

    def __init__(self, node: NodeRuntime, path: StablePath, precise: bool = True) -> None:
        self.node, self.path, self.precise = node, path, precise

    def resume(self, store: StateStore, undo: bool = True) -> tuple[restart.RestartImage | None, dict[str, int]]:
        """Take the newest recovery point's state from ``store`` (none: start empty) and set each output
        to drop the stable tuples the replay regenerates up to what its topic holds, checking each;
        returns the point and the input offsets to replay from. ``undo``: announce an UNDO on each
        output, since it may end with tentative tuples of the process that died."""
        return self.resume_from(store.recover(), undo, restored=store.restores)

    def resume_from(
        self, image: restart.RestartImage | None, undo: bool, restored: bool
    ) -> tuple[restart.RestartImage | None, dict[str, int]]:
        """``_resume`` from a checkpoint already read; ``restored``: the operators hold its state
        already (a warm standby applied it as it came), else they are given it here."""
        node = self.node
        bootstrap = node.settings.bootstrap
        out = node.outputs
        lasts = {s: last_stable_id(bootstrap, out.topic(s), out.kafka_partition(s)) for s in self.path.soutputs}
        if image is not None and self._claims_unwritten(image, lasts):
            image = None
            if restored:
                for op in node.pipeline.operators:
                    op.clear()
        offsets: dict[str, int] = {}
        if image is not None:
            self.check_retained(image.offsets)
            if not restored:
                node.pipeline.restore(image.snapshot, image.deltas)
            self.path.sunion.restore(image.sunion, time.monotonic())
            for s, (next_id, boundary) in image.outputs.items():
                if s in self.path.soutputs:
                    self.path.soutputs[s] = SOutput(next_id, boundary)
            for p in node.inputs.ports:
                if p.stream in image.ports:
                    p.replica, p.last_stable = image.ports[p.stream]
            offsets = image.offsets
            log.info("restarting from the restart image of %d", image.taken_ms)
        for s, last in lasts.items():
            if last is None:
                continue  # a first run: nothing written yet
            if image is None and last >= 0:  # everything is regenerated from the inputs' start
                self.check_retained({p.topic: 0 for p in node.inputs.ports})
            self.skip_written(s, last, undo)
        return image, offsets

    def skip_written(self, stream: str, last: int, undo: bool) -> None:
        """Make ``stream`` drop the stable tuples a replay regenerates up to ``last`` (the last stable
        id its log holds), each checked against the log (``precise``; else they are written again).
        ``undo``: announce an UNDO after ``last``."""
        if not self.precise:
            return  # rollback: write it again, repeating duplicates under the same ids
        node, so = self.node, self.path.soutputs[stream]
        topic, part = node.outputs.topic(stream), node.outputs.kafka_partition(stream)
        in_topic = stable_after(node.settings.bootstrap, topic, part, so.next_id - 1) if last >= so.next_id else {}
        announced = so.restarted(last, in_topic, f"{topic}[{part}]")
        if undo:
            node.outputs.queue(stream).extend(announced)
        else:
            so.rec_done_due = False

    def _claims_unwritten(self, image: restart.RestartImage, lasts: dict[str, int | None]) -> bool:
        """Whether ``image`` counts stable tuples its output topics do not hold (from their live writers):
        written by a replaced copy of this replica after it was fenced. Such an image is not used,
        or the restart would leave a gap in the ids; the replica starts from its inputs instead."""
        for s, (next_id, _) in image.outputs.items():
            last = lasts.get(s, -1)
            if next_id - 1 > (last if last is not None else -1):
                log.warning(
                    "the restart image counts %s up to stable id %d, the topic holds up to %s: written by a "
                    "replaced copy of this replica, so the restart starts from the inputs",
                    s,
                    next_id - 1,
                    last,
                )
                return True
        return False

    def check_retained(self, offsets: dict[str, int], redo: bool = False) -> None:
        """Stop with one line when input that must be read again (``offsets``, by topic) is gone from the logs."""
        node = self.node
        for topic, off in offsets.items():
            first = first_offset(node.settings.bootstrap, topic, node.partition)
            if first > max(off, 0):
                what = (
                    "its redo of a failure longer than dpc.max_kept would miss input; raise the inputs' retention "
                    "above the longest failure"
                    if redo
                    else "its restart would renumber its output; raise the inputs' retention, or delete this "
                    "replica's output and restart topics to start it afresh"
                )
                raise RestartImageError(
                    f"{node.plan.node} p{node.partition} r{node.replica} must replay {topic}[{node.partition}] "
                    f"from offset {max(off, 0)}, but the log now starts at {first} (retention or trimming removed "
                    f"the rest): {what}"
                )
