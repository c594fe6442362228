"""CEC as a node's state store (``state: cec``): the window's parts checkpointed in its own output log.

The node's one window runs through a ``Checkpointer``: each stable run of input goes in at its input
ids (the positions a recovery replays from), and what it makes goes onto the output's queue in the
order it happened, in the batch's transaction: results numbered by SOutput as every node's, footprints
(CEC_OPEN, CEC_CHECK) unnumbered, each record stamped with ``ht.cec``; between batches, the
checkpoint slots' CEC_CHECKs. Nothing else is written: there is no restart topic, and ``take`` keeps
nothing, since every recovery point is already in the log.

A restart rebuilds the window from the log's tail (``outlog.eventual``), seeks the input after T, the
oldest footprint's input id, and replays it under the corrected duplicate rule; the output's ids go on
from the log's last one, none regenerated. While the node is in an upstream failure the checkpointer is
paused: tentative results are not checkpointed, and the reconciliation rolls the window back to its
parts as they were, from which the redo is recorded again.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from services.cec import outlog
from services.cec.checkpointer import Checkpointer, Out
from services.cec.footprints import Kind
from services.cec.intensity import Intensity
from services.cec.scan import ScanError
from services.core.codec import codec_for
from services.core.errors import RestartImageError
from services.core.tuples import TupleType, cec_header
from services.dpc.soutput import SOutput
from services.node import restart
from services.node.path import StablePath
from services.node.scheme import NodeRuntime
from services.node.state import RECOVERY_S, RecoveryPoint, replay_point
from services.operators.base import _ignore

log = logging.getLogger(__name__)


class CecStore:
    """A CEC node partition's checkpointer and its recovery (see the module's docstring)."""

    restores = True  # ``recover`` leaves the state in the operators
    busy = False  # it never writes in the background

    def __init__(self, node: NodeRuntime, topic: str, path: StablePath) -> None:
        self.node, self.path = node, path
        (op,) = node.pipeline.operators  # the spec allows one window (``services.spec.checkpoint``)
        (out,) = node.plan.outputs
        self.stream, self.sink = out.stream, op.emit  # the pipeline's: where a paused window's results go
        self.cp = Checkpointer(op, Intensity(**node.plan.params))
        self.made: list[Out] = []  # what the input pushed made, not queued yet
        self.encode_footprint = codec_for(outlog.FOOTPRINT).encode
        self.operator = op.name
        path.entries[0] = self.push
        path.checkpointed = self
        node.outputs.stamp(self.stream, outlog.FOOTPRINT)

    # -- the stable path's side (``services.node.path.Checkpointed``) ------------------------
    def push(self, items: list[Any]) -> None:
        self.made.extend(self.cp.push(self.path.first_id, items))

    def collect(self) -> None:
        made, self.made = self.made, []
        made.extend(self.cp.collect())
        if made:
            self._queue(made)

    def pause(self) -> None:
        self.cp.pause(self.sink)

    def resume(self) -> None:
        self.cp.resume()

    def background(self, now: float) -> None:
        """The slot runs from now, not from the loop's ``now`` (taken before the batch ran)."""
        made = self.cp.background(_monotonic_ms(), _monotonic_ms)
        if made:
            self._queue(made)

    def _queue(self, made: list[Out]) -> None:
        """``made`` on the output's queue in order: results numbered, footprints not, each stamped."""
        node, stream = self.node, self.stream
        so: SOutput = self.path.soutputs[stream]
        queue, outputs = node.outputs.queue(stream), node.outputs
        encoded = self._encode([p for m, p in made if m.kind is Kind.RESULT])
        results = iter(encoded)
        partition, epoch = node.partition, outputs.epoch
        run: list[Any] = []  # results in a row, numbered together
        for mark, payload in made:
            stamp = cec_header(mark.win, mark.n, mark.pos, mark.seq, mark.xs)
            if mark.kind is Kind.RESULT:
                got = next(results)
                if got is not None:
                    (value, key), stime = got
                    run.append(((value, key, stamp), stime))
                    continue
            if run:
                so.stable(run, queue)
                run = []
            if mark.kind is Kind.RESULT:  # dead-lettered: the part is closed all the same
                queue.append((TupleType.CEC_CLOSE, -1, mark.stime, (None, None, stamp)))
                continue
            value = self.encode_footprint(outlog.footprint(self.operator, partition, epoch, mark, payload))
            queue.append((outlog.TYPES[mark.kind], -1, mark.stime, (value, None, stamp)))
        if run:
            so.stable(run, queue)

    def _encode(self, results: list[Any]) -> list[Any]:
        """Each result as (payload, stime), or None where it does not fit the output's schema (dead-lettered)."""
        outputs, reject, stream = self.node.outputs, self.node.reject, self.stream
        encoded: list[Any] = outputs.encode(stream, results, reject)
        if len(encoded) == len(results):
            return encoded
        return [next(iter(outputs.encode(stream, [r], _ignore)), None) for r in results]

    # -- the store's side (``services.node.state.StateStore``) -------------------------------
    def take(self, point: RecoveryPoint) -> None:
        """Nothing to keep: the log holds every recovery point already."""

    def wait(self) -> None:
        """Nothing is written in the background."""

    def new_chain(self) -> None:
        """Each recovery reads the log alone."""

    def written(self) -> RecoveryPoint | None:
        return None

    def recover(self) -> restart.RestartImage | None:
        """The window rebuilt from the output log's tail, the input to replay from after T, the output's
        next id after the log's last; None when the log holds no record of the window yet."""
        node, stream = self.node, self.stream
        bootstrap = node.settings.bootstrap
        topic, part = node.outputs.topic(stream), node.outputs.kafka_partition(stream)
        t0 = time.monotonic()
        try:
            with node.working(RECOVERY_S):  # a long scan is progress: heartbeats go on
                ec = outlog.eventual(bootstrap, topic, part)
        except ScanError as e:
            raise RestartImageError(f"{node.plan.node} p{node.partition} r{node.replica}: {topic}[{part}]: {e}") from e
        if not ec.read:
            return None
        last = self.cp.load(ec)
        log.info(
            "rebuilt %d parts from the last %d records of %s[%d] in %.0f ms; replaying after input id %d",
            len(ec.parts),
            ec.read,
            topic,
            part,
            (time.monotonic() - t0) * 1000,
            last,
        )
        return replay_point(node, self.path, last)


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)
