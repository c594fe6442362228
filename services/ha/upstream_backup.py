"""Upstream backup (ICDE 2005, section 5.2): the upstream logs are the backup; a takeover rebuilds.

The primary keeps no copy of its state anywhere. At every bucket start its operators reach it
takes a cut (``services.ha.acks``): per input, the oldest tuple its state still needs, and the
output ids that follow the cut; every ``interval_ms`` (M) it publishes the newest cut whose
output is written as a level-1 acknowledgement on ``<spec>.ha.acks``. So an ack is at most M and
a loop turn behind the output, also when the input stops right after a burst (a catch-up). The
coordinator trims each upstream log at the oldest acknowledgement of all its readers
(``services.coordinator``), so the logs keep what a rebuild needs and little more: the state,
about M of input and the time an ack takes.

At a takeover the new primary starts empty, reads each input again from the newest ack whose
output the log holds, and drops everything it computes before that ack's cut: those results
are either written already or wrong (windows missing the tuples before the ack, which were
emitted before the cut). From the cut on its results are the old primary's, with the ids the
ack names; those the log holds already are dropped, each checked against the log. So the
recovery is precise, for any node hastream runs (its operators and its tuple-time merge
are deterministic), and costs a replay of the state's span of input plus about M.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from confluent_kafka import Message

from services.control.messages import now_ms
from services.control.states import Role
from services.core.errors import DecodeError
from services.core.retry import retry_transient
from services.dpc.buckets import STuple
from services.dpc.soutput import SOutput
from services.ha.acks import Ack, Needs, newest_usable
from services.ha.scheme import HaScheme
from services.log.tail import backward, offset_after_stable, output_tail
from services.log.trim import check_retained
from services.node.merge import Admitted
from services.node.ports import InputPort
from services.node.scheme import NodeRuntime

log = logging.getLogger(__name__)


class Acking:
    """The primary's cuts and level-1 acknowledgements, and the rebuild from the newest one: upstream
    backup's takeover, and active standby's secondary joining (see the module's docstring).

    A part of ``scheme``'s: it runs on the scheme's stable path (a bucket's first ids before it runs,
    a cut at a bucket start reached) and reads the scheme's role and epoch."""

    def __init__(self, scheme: HaScheme, interval_ms: int) -> None:
        self.scheme, self.node, self.path = scheme, scheme.node, scheme.path
        self.interval_s = interval_ms / 1000
        self.needs = Needs(scheme.dpc.bucket)
        self.streams = [p.stream for p in self.node.inputs.ports]  # by port index
        self.latest: Ack | None = None  # a primary's newest cut, published once the output before it is written
        self.tails: dict[str, int] = {}  # output stream -> the last stable id its log held at the last rebuild
        self.published: Ack | None = None  # the last ack published
        self.reported = True  # whether it is reported as the restart point
        self.next_cut = 0.0
        self.acks_sent = 0
        self.path.on_bucket = self.on_bucket
        self.path.on_step = self.on_step

    # -- takeover ---------------------------------------------------------------------
    def rebuild(self, write: bool) -> dict[str, int]:
        """Start empty from the newest ack whose output the log holds (none: from the inputs' start):
        drop what is computed before its cut, number what follows as it says. ``write``: this
        replica writes the log (a new primary), so what it regenerates of the log's tail is dropped,
        each checked, and the ack is published again as its own; returns the offsets to read from."""
        node, path = self.node, self.path
        bootstrap, part = node.settings.bootstrap, node.partition
        tails = {
            s: output_tail(bootstrap, node.outputs.topic(s), node.outputs.kafka_partition(s)) for s in path.soutputs
        }
        self.tails = {s: last for s, (last, _) in tails.items()}
        written = {s: last for s, (last, _) in tails.items()}
        ack = newest_usable(read_acks(bootstrap, node.plan.acks_topic, node.plan.node, part, written), written)
        ports = node.inputs.ports
        if ack is None:  # nothing acknowledged: no reader trimmed anything, the inputs start at their beginning
            ids, bounds = {p.stream: 0 for p in ports}, {}
            offsets = {p.topic: 0 for p in ports}
        else:
            ids, bounds = ack.input_ids, ack.input_bounds
            offsets = {p.topic: self._offset_of(p, ack) for p in ports}
            path.resume_at = ack.cut
            path.op_time = ack.cut - path.bucket  # the replay's next step is the cut
        check_retained(bootstrap, {(t, part): off for t, off in offsets.items()})
        for s, (last, bound) in tails.items():
            path.soutputs[s] = SOutput(ack.outputs.get(s, 0) if ack else 0, bound)
            if write and last >= 0:
                self.scheme.resume.skip_written(s, last, undo=False)
        for p in ports:
            p.midway = True  # read from an offset before the tuple acked: the first id may be any
            promised = bounds.get(p.stream)
            if promised is not None:  # read before the position read from: not read again
                path.sunion.boundary(p.index, promised, time.monotonic())
            self.needs.start(p.stream, ids.get(p.stream, 0), offsets[p.topic], promised)
        if write and ack is not None:
            self._publish(
                ack.restamped(self.scheme.epoch, now_ms())
            )  # the coordinator trims for this primary from now on
        self.next_cut = time.monotonic() + self.interval_s
        log.info(
            "rebuilding from %s",
            f"the ack of cut {ack.cut} (epoch {ack.epoch}): {offsets}" if ack else "the inputs' start",
        )
        return offsets

    def _offset_of(self, port: InputPort, ack: Ack) -> int:
        """Where ``port`` reads again from: the offset acked for a one-log input, else the offset of the
        acked id in the replica log the port reads now (replica logs differ in offsets, not in ids)."""
        if len(port.topics) == 1:
            return ack.input_offsets[port.topic]
        node = self.node
        return offset_after_stable(node.settings.bootstrap, port.topic, node.partition, ack.input_ids[port.stream] - 1)

    def _single_log(self, offsets: dict[str, int]) -> dict[str, int]:
        """The offsets worth acknowledging, by topic: those of inputs with one log (the trimmable ones)."""
        return {p.topic: offsets[p.stream] for p in self.node.inputs.ports if len(p.topics) == 1}

    # -- processing --------------------------------------------------------------------
    def note_reads(self, positions: dict[str, int]) -> None:
        """Where each input's log stands after this poll (``Admitted.positions``): an offset before every
        id not read yet."""
        by_topic, boundaries = self.node.inputs.by_topic, self.path.sunion.boundaries
        for topic, offset in positions.items():
            port = by_topic[topic]
            self.needs.read(port.stream, port.last_stable, offset, boundaries[port.index])

    def publish_pending(self) -> None:
        """Report the last ack published as the restart point, then publish the newest cut once an
        interval has passed since the last: it was taken before this loop turn, and the loop flushed
        the output before it since."""
        if not self.reported:
            self._report()
        now = time.monotonic()
        if self.latest is not None and now >= self.next_cut:
            self.next_cut = now + self.interval_s
            self._publish(self.latest)
            self.latest = None

    def on_bucket(self, k: int, tuples: list[STuple]) -> None:
        """Note what each input gives this bucket before it runs: a cut at its start needs it."""
        lo: dict[int, int] = {}
        for t in tuples:
            if t.id < lo.get(t.port, t.id + 1):
                lo[t.port] = t.id
        start = k * self.path.bucket
        for port, first in lo.items():
            self.needs.processed(self.streams[port], start, first)

    def on_step(self, t: int) -> None:
        """The operators were just advanced to bucket start ``t``: a primary cuts there, the newest cut
        to publish (a cut costs a few dictionaries per bucket, not per tuple). A secondary (active
        standby's) cuts once an interval and drops it: a cut forgets what no later cut can need, so
        its bookkeeping stays as small as a primary's however long it runs."""
        role = self.scheme.role
        if role is Role.PRIMARY:
            self.latest = self._cut(t)
            return
        now = time.monotonic()
        if now >= self.next_cut and role is not Role.CANDIDATE:
            self.next_cut = now + self.interval_s
            self._cut(t)

    def _cut(self, t: int) -> Ack:
        node, scheme = self.node, self.scheme
        held = {self.streams[p]: i for p, i in self.path.sunion.oldest_ids().items()}
        need = self.needs.cut(node.pipeline.oldest_time(), t, held)
        outputs = {s: so.next_id for s, so in self.path.soutputs.items()}
        offsets = self._single_log(need.offsets)
        return Ack(node.plan.node, node.partition, scheme.epoch, t, need.ids, offsets, outputs, now_ms(), need.bounds)

    def _publish(self, ack: Ack) -> None:
        node = self.node
        if node.outputs.guard is not None:
            node.outputs.guard()  # a primary that was replaced acknowledges nothing more
        node.producer.send(node.plan.acks_topic, ack.encode(), ack.key, 0)
        self.acks_sent += 1
        self.published, self.reported = ack, False

    def _report(self) -> None:
        """Once the last ack published is written, a takeover, or a secondary that joins, reads back from
        it at the oldest: say so in the heartbeats (the coordinator trims the logs no further). A loop
        turn since its publication flushed it, or it is written now: also when the input stopped."""
        ack, node = self.published, self.node
        self.reported = True
        if ack is None or self.scheme.role is not Role.PRIMARY:
            return
        node.producer.flush()
        node.set_keeps(ack.outputs)
        node.set_needs(ack.input_offsets)


class UpstreamBackupScheme(HaScheme):
    wants_positions = True  # the cuts note where each input's log stands

    def __init__(self, node: NodeRuntime) -> None:
        super().__init__(node)
        self.acking = Acking(self, node.plan.ha.interval_ms)

    def on_promote(self) -> dict[str, int] | None:
        return self.acking.rebuild(write=True)

    def before_batch(self, batch: Admitted, now: float) -> None:
        if batch.positions:
            self.acking.note_reads(batch.positions)

    def after_batch(self, now: float, idle: bool) -> None:
        self.acking.publish_pending()
        super().after_batch(now, idle)


@retry_transient
def read_acks(
    bootstrap: str, topic: str, node: str, partition: int, written: Mapping[str, int | None], chunk: int = 2000
) -> list[Ack]:
    """The acknowledgements of one node partition in the acks topic, newest first, back to one chunk
    past the newest one whose output the logs hold (``newest_usable`` of ``written``), not the whole
    topic: it keeps one ack per primary of every epoch, and a takeover would read more the older the
    deployment. A replaced primary's late acks follow its successor's by less than a chunk."""
    out: list[Ack] = []
    found = False
    for rows in backward(bootstrap, topic, 0, chunk, _ack_of(f"{node}/p{partition}/".encode(), topic)):
        out.extend(a for _, a in reversed(rows) if a is not None)
        if found:
            break
        found = newest_usable(out, written) is not None
    return out


def _ack_of(prefix: bytes, topic: str) -> Callable[[Message], Ack | None]:
    """Reads a message of the acks topic as an ack of the node partition its key starts with ``prefix``."""

    def view(m: Message) -> Ack | None:
        if m.value() is None or not (m.key() or b"").startswith(prefix):
            return None
        try:
            return Ack.decode(m.value())  # type: ignore[arg-type]
        except DecodeError:
            log.warning("skipping an ack that cannot be read at %s@%d", topic, m.offset())
            return None

    return view
