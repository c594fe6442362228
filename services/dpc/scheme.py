"""DPC as a node's recovery scheme: SUnion in front of the operators, SOutput behind, the paper's state machine.

Per batch: SUnion takes the input in and serializes it (stable once boundaries pass,
tentative after the node's delay share when an input is missing or tentative), the
operators run, SOutput numbers the results. The states are the paper's (``states``):

- STABLE: only stable tuples are processed; a restart image is written periodically.
- UPSTREAM_FAILURE: SUnion released a tentative bucket. Just before, the reconciler took a
  snapshot (checkpoint/redo) or set a mark (undo/redo); results are tentative from then on.
  The node's input ports keep following the best upstream replica.
- STABILIZATION: every tentative input has its stable version; with the consistency
  manager's turn (the coordinator's GRANT, or turn-taking without it) the replica sends
  UNDO, rolls back, redoes the stable inputs, sends REC_DONE and is STABLE again. A
  failure whose kept input outgrew ``dpc.max_kept`` (spilled, see ``sunion``) is redone
  from the logs instead: SUnion and every input port go back to where they were when the
  failure began, and the loop reads the input again, still in STABILIZATION, until it has
  reached the inputs' ends as they were when the turn came.

The scheme makes no Kafka calls: it works through the node (``NodeRuntime``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Message

from services.control.messages import COORDINATOR, ControlKind, ControlMessage, now_ms
from services.control.states import NodeState
from services.core.errors import ContractError, DecodeError, HeaderError, RestartImageError
from services.core.tuples import (
    BOUNDARY,
    NO_TIME,
    REC_DONE,
    STABLE,
    TENTATIVE,
    UNDO,
    TupleType,
    admit,
    parse_headers,
    peek,
    tmax_of,
)
from services.dpc.consistency import may_reconcile_alone, policy_while_partner_reconciles
from services.dpc.reconciler import reconciler
from services.dpc.soutput import SOutput
from services.dpc.states import check_transition
from services.dpc.sunion import STuple, SUnion, SUnionState
from services.log.tail import first_offset, last_stable_id, stable_after
from services.node import restart
from services.node.ingress import RawReader
from services.node.ports import InputPort, Move
from services.node.scheme import NodeRuntime
from services.operators.base import Item, _ignore
from services.spec.policies import Policy

log = logging.getLogger(__name__)

STALE = "stale tentative"  # NodeStats.skipped key
FENCED = "fenced"  # NodeStats.skipped key: messages of a replaced upstream writer
REQUEST_EVERY_S = 2.0  # a REQUEST without an answer is sent again after this long


@dataclass
class InputPoint:
    """SUnion's state and where every input stands: what a restart image holds, and where a
    spilled failure's redo goes back to (the failure's start)."""

    sunion: SUnionState
    ports: dict[str, tuple[int, int]]  # input stream -> (replica read, last stable id)
    offsets: dict[str, int]  # input topic -> next offset


class DpcScheme:
    # A node with one input takes it in its log order, without buckets (``services.dpc.sunion``).
    pass_through = True
    # The loop writes each batch without waiting for it (``Outputs.write``): what needs the output
    # acknowledged (a restart image, REC_DONE before DONE) flushes it first.
    overlap_writes = True

    def __init__(self, node: NodeRuntime) -> None:
        self.node = node
        plan = node.plan
        self.dpc = plan.dpc
        self.sunion = SUnion(
            len(plan.inputs),
            self.dpc.bucket,
            plan.delay_s,
            self.dpc.failure_policy,
            self.dpc.max_kept,
            plan.hold_s,
            in_order=plan.in_order and self.pass_through,
        )
        self.soutputs = {o.stream: SOutput() for o in plan.outputs}
        self.reconciler = reconciler(plan.reconciliation, node.pipeline)
        self.entries = [node.pipeline.entry(i.stream) for i in plan.inputs]
        self.direct: list[Item] = []  # (record, stime) of stable tuples taken past SUnion in this batch
        self.restart_topic = plan.restart_topics[node.replica]
        self.state = NodeState.STABLE
        self.failed = False  # processed tentative input since the last reconciliation
        self.requested_at = 0.0
        self.requested_ms = 0  # this replica's clock at this round's first REQUEST: names the round
        self.granted = False
        self.advanced: int | None = None  # the last frontier sent downstream as a BOUNDARY
        self.op_time: int | None = None  # the operators' time: the last advance()
        self.t_in = NO_TIME  # tuple time of the last input tuple processed: tentative results' t_max
        self.op_time_saved: int | None = None  # op_time when the failure began
        self.pre_failure: bytes | None = None  # the operators' state when the failure began
        self.failure_start: InputPoint | None = None  # and the rest of the node's
        self.start_imaged = False  # a spilled failure's restart image (its start) is written
        self.replaying: dict[str, tuple[int, int]] | None = None  # a spilled redo: the input ends to reach
        self.next_image = time.monotonic()
        self.recovering = True  # restarted and not caught up yet: heartbeats say RECOVERING
        self.catch_up: dict[str, tuple[int, int]] | None = None  # the input ends to reach first

    # -- restart ----------------------------------------------------------------------
    def on_restart(self) -> dict[str, int] | None:
        """Continue from the newest restart image (or from scratch), then resume each output.

        Refuses to start (``RestartImageError``, one line) when the input the restart must
        replay is no longer in the logs: the output would be renumbered otherwise.
        """
        self.node.begin_writing()  # a copy of this replica that is still running is fenced before the logs are read
        image, offsets = self._resume()
        if image is not None and image.failed:
            self._enter_failure(image.snapshot, offsets)  # still in the failure the image was taken in
        return offsets

    def _resume(self, undo: bool = True) -> tuple[restart.RestartImage | None, dict[str, int]]:
        """Take the newest restart image's state (none: start empty) and set each output to drop
        the stable tuples the replay regenerates up to what its topic holds, checking each;
        returns the image and the input offsets to replay from. ``undo``: announce an UNDO
        on each output, since it may end with tentative tuples of the process that died."""
        node = self.node
        image = restart.load(node.settings.bootstrap, self.restart_topic, node.partition)
        return self._resume_from(image, undo, restored=False)

    def _resume_from(
        self, image: restart.RestartImage | None, undo: bool, restored: bool
    ) -> tuple[restart.RestartImage | None, dict[str, int]]:
        """``_resume`` from a checkpoint already read; ``restored``: the operators hold its state
        already (a warm standby applied it as it came), else they are given it here."""
        node = self.node
        bootstrap = node.settings.bootstrap
        lasts = {s: last_stable_id(bootstrap, node.outputs.topic(s), node.partition) for s in self.soutputs}
        if image is not None and self._claims_unwritten(image, lasts):
            image = None
            if restored:
                for op in node.pipeline.operators:
                    op.clear()
        offsets: dict[str, int] = {}
        if image is not None:
            self._check_retained(image.offsets)
            if not restored:
                node.pipeline.restore(image.snapshot, image.deltas)
            self.sunion.restore(image.sunion, time.monotonic())
            for s, (next_id, boundary) in image.outputs.items():
                if s in self.soutputs:
                    self.soutputs[s] = SOutput(next_id, boundary)
            for p in node.inputs.ports:
                if p.stream in image.ports:
                    p.replica, p.last_stable = image.ports[p.stream]
            offsets = image.offsets
            log.info("restarting from the restart image of %d", image.taken_ms)
        for s, last in lasts.items():
            if last is None:
                continue  # a first run: nothing written yet
            if image is None and last >= 0:  # everything is regenerated from the inputs' start
                self._check_retained({p.topic: 0 for p in node.inputs.ports})
            self._skip_written(s, last, undo)
        return image, offsets

    def _skip_written(self, stream: str, last: int, undo: bool) -> None:
        """Make ``stream`` drop the stable tuples a replay regenerates up to ``last`` (the last stable
        id its log holds), each checked against the log. ``undo``: announce an UNDO after ``last``."""
        node, so = self.node, self.soutputs[stream]
        topic = node.outputs.topic(stream)
        in_topic = (
            stable_after(node.settings.bootstrap, topic, node.partition, so.next_id - 1) if last >= so.next_id else {}
        )
        announced = so.restarted(last, in_topic, f"{topic}[{node.partition}]")
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

    def _check_retained(self, offsets: dict[str, int], redo: bool = False) -> None:
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

    def on_stop(self) -> None:
        self._flush()  # what is decided goes out now, not after the restart
        self._write_image()
        self.node.images.wait()

    # -- input ------------------------------------------------------------------------
    def before_batch(self, msgs: list[Message], now: float) -> None:
        """Hand each message to SUnion by type; malformed ones go to the dead-letter topic."""
        if self.sunion.in_order and not self.failed and self.node.inputs.ports[0].fresh is None:
            self._take_in_order(msgs, now)
        else:
            self._take(msgs, now)
        self.node.stats.consumed += len(msgs)

    def _take_in_order(self, msgs: list[Message], now: float) -> None:
        """One input in order and no failure: its next stable tuple, the usual message, goes straight
        to the operators (``direct``, no bucket to wait in); any other message through ``_take`` to
        SUnion, and the rest of the batch after it, so the input's order holds (``after_batch`` runs
        ``direct`` first)."""
        su, port, append = self.sunion, self.node.inputs.ports[0], self.direct.append
        topic, gate, decode, bounds = port.topic, port.gate, port.decode, su.boundaries
        if port.gap is not None or port.tmax is not None or su.pending:
            self._take(msgs, now)
            return
        last, high, bound = port.last_stable, su.high, bounds[0]  # kept in locals: written back before _take
        for i, m in enumerate(msgs):
            try:
                got = admit(m.headers(), gate)
                if (
                    got is not None
                    and got[0] is STABLE
                    and got[1] == last + 1
                    and (bound is None or got[2] >= bound)
                    and m.topic() == topic
                ):
                    append((decode(m.value()), got[2]))
                    _, last, stime, carried = got
                else:
                    got = None
            except (HeaderError, DecodeError):
                got = None
            if got is None:
                port.last_stable, su.high = last, high
                self._take([m], now)  # the general path, which also says why a message is bad
                if port.gap is not None or port.tmax is not None or su.pending:
                    self._take(msgs[i + 1 :], now)  # SUnion's buckets keep the input's order from here
                    return
                last, high, bound = port.last_stable, su.high, bounds[0]
                continue
            if stime > high:
                high = stime
            if carried is not None:  # a BOUNDARY rode on the tuple
                port.last_stable, su.high = last, high
                su.boundary(0, carried, now)
                bound = bounds[0]
        port.last_stable, su.high = last, high

    def _take(self, msgs: list[Message], now: float) -> None:
        node = self.node
        su, by_topic, stats = self.sunion, node.inputs.by_topic, node.stats
        bounds = su.boundaries
        for m in msgs:
            topic = m.topic() or ""
            port, fresh = by_topic.get(topic), False
            if port is None:  # rule 4's second replica, or in flight from a replica the port just left
                port = node.inputs.fresh_by_topic.get(topic)
                fresh = True
            if port is None or port.gap is not None:
                continue  # in flight from a replica the port just left, or after a gap it reads again
            try:
                if port.raw is not None:
                    self._take_raw(port, port.raw, m, now)
                    continue
                got = admit(m.headers(), port.fresh_gate if fresh else port.gate)
                if got is None:  # written by a replaced copy of the upstream replica
                    if port.upstream is None:
                        self._older_writer(port, m)  # a source has one writer: another one is rejected
                    stats.skipped[FENCED] = stats.skipped.get(FENCED, 0) + 1
                    continue
                t, tid, stime, carried = got
                i = port.index
                if t is STABLE or t is TENTATIVE:
                    bound = bounds[i]
                    tm = NO_TIME
                    if t is TENTATIVE:
                        news = self._new_tentative(port, fresh, tid, stime, bound, m)
                        if news is None:
                            continue
                        tm = news
                    if t is STABLE and port.tmax is not None and port.fresh is None and tid == port.last_stable + 1:
                        # Stable tuples past the tentative ones kept at a switch (rule 3): they replace them.
                        self._replace_tentative(port)
                    if tid <= port.last_stable:
                        if port.upstream is None:  # one log, one writer: never a duplicate to drop quietly
                            raise ContractError(
                                f"tuple id {tid} goes backwards (the stream is at {port.last_stable}): "
                                "an input stream has one writer; feed it from several through an ingress"
                            )
                        if carried is not None:  # the boundary after it may be news: replicas' stable streams agree
                            su.boundary(i, carried, now)
                        continue  # a duplicate after a restart or a switch
                    if t is STABLE and tid != port.last_stable + 1 and not self._first_of_source(port, m):
                        if port.upstream is None:  # a source has one log and one writer: nothing to read again
                            raise ContractError(f"tuple id {tid} jumps past {port.last_stable}: the source skipped ids")
                        port.report_gap(tid)
                        stats.gaps += 1
                        continue
                    if bound is not None and stime < bound:
                        raise ValueError(f"stime {stime} is below the input's boundary {bound}")
                    rec = port.decode(m.value())
                    su.push(i, t, tid, stime, rec, now, tm)
                    if t is STABLE:
                        port.last_stable = tid
                        if carried is not None:  # a BOUNDARY rode on the tuple
                            su.boundary(i, carried, now)
                elif t is BOUNDARY:
                    su.boundary(i, stime, now)
                elif fresh:
                    continue  # from the fresh replica only its new tuples count
                elif t is UNDO:
                    port.control(t)
                    if port.fresh is None:
                        self._replace_tentative(port)
                    else:  # the tuples not processed yet are the fresh replica's: it voids those processed
                        su.undo(i, pending=False)
                        port.processed_tmax = None
                    stats.undos_received += 1
                elif t is REC_DONE:
                    port.control(t)  # its stream is stable again: no switch away from it is due
                    if port.fresh is not None:
                        node.inputs.end_fresh(port)  # corrected: the followed replica's stable stream goes on
                        self._replace_tentative(port)
                    else:
                        stats.skipped["REC_DONE"] = stats.skipped.get("REC_DONE", 0) + 1
            except (HeaderError, DecodeError, KeyError, TypeError, ValueError) as e:
                reason = _reason(e)
                node.deadletter(m, reason)
                stats.deadlettered += 1
                if _sparse(stats.deadlettered):
                    log.warning(
                        "dead-lettered %s[%d]@%d: %s (%d so far)",
                        m.topic(),
                        m.partition(),
                        m.offset(),
                        reason,
                        stats.deadlettered,
                    )

    @staticmethod
    def _older_writer(port: InputPort, m: Message) -> None:
        """Reject a source message an older writer (or another client) wrote after the current writer began."""
        parse_headers(m.headers())  # no or malformed headers: that is the reason
        raise ContractError(
            f"written with writer epoch {peek(m.headers())[2]} after epoch {port.gate.epoch} began: "
            "an input stream has one writer; feed it from several through an ingress"
        )

    def _take_raw(self, port: InputPort, raw: RawReader, m: Message, now: float) -> None:
        """An ingress's raw record as a stable tuple (its id its offset), or a tick as a boundary;
        the input's boundary follows the newest tuple time minus the lateness (``services.node.ingress``)."""
        raw.last_read = now
        off = m.offset() or 0
        if off <= port.last_stable:
            return  # read again after a restart
        stime, rec = raw.read(m)
        su, i = self.sunion, port.index
        bound = su.boundaries[i]
        if rec is None:
            su.boundary(i, stime, now)
            return
        if bound is not None and stime < bound:
            raise ContractError(
                f"late: tuple time {stime} is {bound - stime} ms behind the stream's boundary {bound} "
                f"(the newest tuple time minus the lateness of {raw.lateness} ms)"
            )
        su.push(i, STABLE, off, stime, rec, now)
        port.last_stable = off
        su.boundary(i, stime - raw.lateness, now)

    def _tick_raw(self, now: float) -> None:
        """Write a tick into each raw input idle for its ``idle`` time: its time moves on without records."""
        node = self.node
        for p in node.inputs.ports:
            raw = p.raw
            if raw is not None and raw.tick_due(now):
                node.producer.send(raw.topic, None, None, node.partition, raw.tick())
                raw.last_read = now

    @staticmethod
    def _first_of_source(port: InputPort, m: Message) -> bool:
        """A source's first tuple may have any id if it is not at the log's start: retention may have
        removed the tuples before it before this node existed. At offset 0 ids start at 0. So may
        the first tuple of a port started midway on purpose (``InputPort.midway``)."""
        if port.last_stable >= 0:
            return False
        return port.midway or (port.upstream is None and (m.offset() or 0) > 0)

    def _new_tentative(
        self, port: InputPort, fresh: bool, tid: int, stime: int, bound: int | None, m: Message
    ) -> int | None:
        """A tentative tuple's t_max (NO_TIME if it has none) if it is news to ``port``, else None:
        not while the followed replica reconciles (new tuples then come from the fresh one), not
        what the port already has stably, and only past the t_max of the tentative tuples it
        held at a switch (so none is received twice); counts the rest as skipped."""
        tm = tmax_of(m.headers())
        skip = port.skip_upto
        if (
            (port.fresh is not None and not fresh)
            or (bound is not None and stime < bound)
            or (not fresh and tid <= port.last_stable)  # a replica behind this port: it has that stably
            or (tm is not None and skip is not None and tm <= skip)
        ):
            stats = self.node.stats.skipped
            stats[STALE] = stats.get(STALE, 0) + 1
            return None
        tm = NO_TIME if tm is None else tm
        port.tmax = tm if port.tmax is None else max(port.tmax, tm)
        return tm

    def _replace_tentative(self, port: InputPort) -> None:
        """The port's stable stream replaces the tentative tuples it holds (rule 2)."""
        self.sunion.undo(port.index)
        port.tmax = port.skip_upto = port.processed_tmax = None

    def on_input_move(self, port: InputPort, move: Move, now: float) -> None:
        """The port changed what it reads (``services.node.ports.Move``). Moving to a stable replica
        replaces its tentative tuples; moving to one in a failure keeps them (rule 3), as does
        reading a fresh replica besides a reconciling one (rule 4) until that one is done, except
        those not processed yet: the fresh replica sends them again."""
        if move in (Move.STABLE, Move.GAP, Move.END_FRESH):
            self._replace_tentative(port)
        elif move is Move.FRESH:  # the reconciling replica's tuples not processed yet are void
            self.sunion.undo(port.index, kept=False)
        if move is not Move.END_FRESH:
            self.node.stats.switches += 1

    # -- processing --------------------------------------------------------------------
    def after_batch(self, now: float, idle: bool) -> None:
        if self.direct:
            self._run_direct()
        for bucket in self.sunion.buckets(now):
            self._run(*bucket)
        self._advance()
        if self.node.pipeline.due(now):
            self._flush()

    def _run_direct(self) -> None:
        """The stable tuples of one input in order that went past SUnion (nothing was pending before
        them and the node is not in a failure, ``before_batch``): one run, as SUnion would give them."""
        items, self.direct = self.direct, []
        self._advance_operators(items[0][1] // self.dpc.bucket * self.dpc.bucket, STABLE)
        self.entries[0](items)
        self.t_in = items[-1][1]
        self._collect(STABLE)

    def _run(self, k: int, label: TupleType, tuples: list[STuple]) -> None:
        """Push one bucket through the operators, run by run of one input.

        Operator time first moves to the bucket's start, so what a window closes there
        comes out before the bucket's tuples whether or not the previous bucket came in the
        same poll: the output order depends on the input alone, on every replica and in redo.
        """
        if label is TENTATIVE:
            if not self.failed:
                self._enter_failure()
            self._note_processed(tuples)
        self._advance_operators(k * self.dpc.bucket, label)
        i, n, entries = 0, len(tuples), self.entries
        while i < n:
            port = tuples[i].port
            j = i
            items = []
            while j < n and tuples[j].port == port:
                t = tuples[j]
                items.append((t.rec, t.stime))
                j += 1
            entries[port](items)
            self.t_in = tuples[j - 1].stime
            self._collect(label)
            i = j

    def _note_processed(self, tuples: list[STuple]) -> None:
        """Each port's highest t_max processed: what a fresh replica need not send again (rule 4)."""
        ports = self.node.inputs.ports
        for t in tuples:
            if t.tmax != NO_TIME:
                p = ports[t.port]
                if p.processed_tmax is None or t.tmax > p.processed_tmax:
                    p.processed_tmax = t.tmax

    def _advance_operators(self, t: int, label: TupleType) -> None:
        if self.op_time is None or t > self.op_time:
            self.op_time = t
            self.node.pipeline.advance(t)
            self._collect(label)

    def _advance(self) -> None:
        """Move operator time to SUnion's stable frontier and tell downstream with a BOUNDARY."""
        f = self._frontier()
        if f is None or self.failed or (self.advanced is not None and f <= self.advanced):
            return
        self.advanced = f
        self._advance_operators(f, STABLE)
        self._boundary()

    def _frontier(self) -> int | None:
        """The time the operators may advance to: SUnion's stable frontier."""
        return self.sunion.frontier()

    def _boundary(self) -> None:
        """BOUNDARY at the operators' time, or below the first result an operator still holds."""
        if self.advanced is None or self.failed:
            return
        held = self.node.pipeline.held()
        b = self.advanced if held is None else min(self.advanced, held)
        queue = self.node.outputs.queue
        for s, so in self.soutputs.items():
            so.boundary(b, queue(s))

    def _flush(self) -> None:
        """Emit what the operators hold (a Spark window's job), labelled as the processing that decided
        it: tentative while in a failure (what was decided before it was flushed on the way in)."""
        node = self.node
        if not node.pipeline.holders:
            return  # every operator emits at once
        node.pipeline.flush(node.tick)
        # When a result is flushed depends on the replica's timing, so its t_max is its own tuple
        # time (a window's end), which every replica gives it, not the input read by then.
        self._collect(TENTATIVE if self.failed else STABLE, own_tmax=True)
        self._boundary()

    def _collect(self, label: TupleType, own_tmax: bool = False) -> None:
        """Number the operators' results and queue them; dead-letter the tuples they rejected.
        Tentative results carry the t_max of the input processed so far (``own_tmax``: their own time).

        Only stable processing rejects for good (the same tuples on every replica); a
        tentative rejection is redone, and rejected again if need be, on the stable input.
        """
        node = self.node
        pipeline, queue, outputs = node.pipeline, node.outputs.queue, node.outputs
        stable = label is STABLE
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

    def _enter_failure(self, snapshot: bytes | None = None, offsets: dict[str, int] | None = None) -> None:
        """First tentative input: remember the pre-failure state to come back to.

        SUnion's state and the input positions are remembered too (tuples, not clock
        readings): a failure that spills goes back to them to read its input again.
        """
        node = self.node
        self._flush()  # results decided on stable input are stable
        self.pre_failure = snapshot if snapshot is not None else node.pipeline.snapshot(node.tick)
        self.reconciler.begin(self.pre_failure)
        self.failure_start = self._input_point(offsets)
        self.start_imaged = False
        self.op_time_saved = self.op_time
        self.failed = True
        self._set_state(NodeState.UPSTREAM_FAILURE)

    def _set_state(self, state: NodeState) -> None:
        self.state = check_transition(self.state, state)
        recovering = self.recovering and state is not NodeState.STABILIZATION  # a partner must see a reconciliation
        self.node.set_state(NodeState.RECOVERING if recovering else state)
        log.info("%s", state.value)

    def _check_caught_up(self) -> None:
        """A restarted replica is recovering until it has deduplicated its replay and read its
        inputs up to where they ended when it started; then it says its real state, and
        closes the restart's UNDO with a REC_DONE unless a failure goes on."""
        node = self.node
        if self.catch_up is None:
            self.catch_up = node.inputs.ends()
        if self._deduplicating() or not node.inputs.reached(self.catch_up):
            return
        self.recovering = False
        if not self.failed:
            for s, so in self.soutputs.items():
                so.rec_done(node.outputs.queue(s))
        self._set_state(self.state)
        log.info("caught up after the restart")

    def progress(self) -> tuple[int, int]:
        stable = sum(so.next_id for so in self.soutputs.values())
        return stable, -1 if self.advanced is None else self.advanced

    # -- reconciliation ----------------------------------------------------------------
    def on_control(self, msg: ControlMessage, now: float) -> None:
        node = self.node
        if msg.kind is not ControlKind.GRANT or not msg.is_for(node.plan.node, node.partition, node.replica):
            return
        if self.requested_ms and msg.round_ms == self.requested_ms:
            self.granted = True  # the answer to this round's REQUEST (matched by round, not by clocks)
        elif not self.granted and msg.round_ms and msg.round_ms != self.requested_ms:
            # A grant for a round that is over (a re-sent or replayed one): give it back at
            # once, or the partner would wait for its lease to expire.
            node.send_control(
                ControlMessage(ControlKind.DONE, node.plan.node, node.partition, node.replica, round_ms=msg.round_ms)
            )

    def _partners(self) -> list[NodeState]:
        """The other replicas' states, by replica number."""
        node = self.node
        states = node.monitor.states(node.plan.node, node.partition, node.plan.replicas)
        del states[node.replica]
        return states

    def on_check(self, now: float) -> None:
        self._tick_raw(now)
        if self.recovering:
            self._check_caught_up()
        if self.replaying is not None:
            self._check_replayed()
        if self.sunion.spilled:
            self.reconciler.spill()
        self._check_reconciliation(now)
        self._image_if_due(now, self.dpc.restart_image_interval / 1000)

    def _deduplicating(self) -> bool:
        """An output still drops what a replay regenerates of its topic."""
        return any(so.deduplicating for so in self.soutputs.values())

    def _image_if_due(self, now: float, interval_s: float) -> None:
        """A restart image every ``interval_s``, not while a replay is deduplicated."""
        if now < self.next_image or self._deduplicating():
            return
        self.next_image = now + interval_s
        if not self.node.images.busy and not (self.sunion.spilled and self.start_imaged):
            self._write_image()  # skipped while one is in flight, or a spilled failure's start is written

    def _check_reconciliation(self, now: float) -> None:
        partners = self._partners()
        pol = self.dpc.stabilization_policy
        self.sunion.policy = policy_while_partner_reconciles(partners, pol, self.dpc.failure_policy)
        if not self.failed or not self.sunion.ready_to_reconcile(now):
            return
        node = self.node
        stagger = pol is not Policy.SUSPEND
        if not self.granted and node.monitor.state(COORDINATOR, 0, 0) is NodeState.FAILED:
            if may_reconcile_alone(node.replica, partners, stagger):
                self.granted = True
                self._request(stagger)  # announced: a coordinator that comes back knows whose turn it is
        if self.granted and stagger and NodeState.STABILIZATION in partners:
            return  # a partner reconciles already (an older grant, or its own fallback turn): wait for it
        if self.granted:
            self._reconcile()
        elif now - self.requested_at > REQUEST_EVERY_S:
            self.requested_at = now
            self._request(stagger)

    def _request(self, stagger: bool) -> None:
        node = self.node
        self.requested_ms = self.requested_ms or now_ms()
        node.send_control(
            ControlMessage(
                ControlKind.REQUEST,
                node.plan.node,
                node.partition,
                node.replica,
                stagger,
                round_ms=self.requested_ms,
            )
        )

    def _reconcile(self) -> None:
        """Undo the tentative outputs, restore the pre-failure state, redo the corrected inputs.

        Only the settled kept buckets are redone. If an input failed again before the rest
        settled, the node is still in that failure: it takes its pre-failure state anew
        there and processes the remaining kept buckets tentatively again, so stable output
        keeps advancing under an input that goes down again and again.
        """
        node = self.node
        spilled = self.sunion.spilled
        if spilled and self.failure_start is not None:  # its input must still be in the logs
            sources = {p.topic for p in node.inputs.ports if p.upstream is None}  # upstream gaps are read elsewhere
            offsets = self.failure_start.offsets
            self._check_retained({t: off for t, off in offsets.items() if t in sources}, redo=True)
        self._roll_back()
        if spilled:
            self._replay()
            return
        t0 = time.monotonic()
        redone = 0
        for bucket in self.sunion.redo_buckets():
            self._run(*bucket)
            redone += len(bucket[2])
            node.tick()
        self._advance()
        self._flush()  # the corrections, before REC_DONE
        still_failed = self.sunion.in_failure()
        self._end_round(rec_done=not still_failed)
        if still_failed:
            self._enter_failure()
            for bucket in self.sunion.rerun_buckets():
                self._run(*bucket)
                node.tick()
        else:
            self._set_state(NodeState.STABLE)
        log.info(
            "reconciled %d tuples in %.0f ms%s",
            redone,
            (time.monotonic() - t0) * 1000,
            "; a new failure goes on" if still_failed else "",
        )

    def _roll_back(self) -> None:
        """The turn came: UNDO on every output, the operators back to their pre-failure state."""
        self._set_state(NodeState.STABILIZATION)
        queue = self.node.outputs.queue
        for s, so in self.soutputs.items():
            so.undo(queue(s))
        self.reconciler.rollback()
        self.op_time = self.op_time_saved
        self.failed = False
        self.pre_failure = None

    def _end_round(self, rec_done: bool) -> None:
        """The reconciliation is over: REC_DONE downstream (unless a failure goes on), DONE to the coordinator."""
        node = self.node
        if rec_done:
            for s, so in self.soutputs.items():
                so.rec_done(node.outputs.queue(s))
        node.outputs.flush()
        node.send_control(
            ControlMessage(ControlKind.DONE, node.plan.node, node.partition, node.replica, round_ms=self.requested_ms)
        )
        self.granted = False
        self.requested_at, self.requested_ms = 0.0, 0
        node.stats.reconciliations += 1

    def _replay(self) -> None:
        """Redo a spilled failure from the logs: SUnion and every input port go back to the
        failure's start (each port on the replica it reads now, right after the stable
        tuple it had then); the loop then processes the input again."""
        node, start = self.node, self.failure_start
        assert start is not None
        self.sunion.rewind(start.sunion, time.monotonic())
        node.inputs.rewind({s: last for s, (_, last) in start.ports.items()}, node.settings.bootstrap)
        self.failure_start = None
        self.replaying = node.inputs.ends()
        node.stats.replays += 1
        log.info("reconciling a spilled failure: reading the inputs again from where it began")

    def _check_replayed(self) -> None:
        """A spilled failure's redo ends when the inputs are read up to where they ended at the
        turn, or when the input fails again meanwhile (the node is in that new failure)."""
        assert self.replaying is not None
        if not self.failed and not self.node.inputs.reached(self.replaying):
            return
        self.replaying = None
        if not self.failed:
            self._flush()  # the corrections, before REC_DONE
        self._end_round(rec_done=not self.failed)
        if not self.failed:
            self._set_state(NodeState.STABLE)
        log.info("redo from the logs done%s", "; a new failure goes on" if self.failed else "")

    # -- restart image -------------------------------------------------------------------
    def _write_image(self) -> None:
        """Write a restart image: state consistent with the input positions, outputs already
        delivered, so the image never claims output that is not in the topics.

        In an upstream failure the operators' state is tentative: the image holds the state
        from before the failure instead, and SUnion's kept buckets, which redo will need. A
        spilled failure kept no tuples: its image is the failure's start, from which a
        restart reads the failure's input again.
        """
        node = self.node
        node.outputs.flush()
        node.producer.flush()
        spilled = self.failure_start if self.sunion.spilled else None
        point = spilled or self._input_point()
        image = restart.RestartImage(
            self.pre_failure if self.pre_failure is not None else node.pipeline.snapshot(node.tick),
            point.sunion,
            {s: so.state() for s, so in self.soutputs.items()},
            point.ports,
            point.offsets,
            now_ms(),
            # A spilled failure restarts before it began, in the failure only if it began with kept buckets.
            bool(point.sunion.kept) if spilled else self.pre_failure is not None,
        )
        self.start_imaged = spilled is not None
        node.images.write(image, node.tick)  # pickled here; chunked and written in the background

    def _input_point(self, offsets: dict[str, int] | None = None) -> InputPoint:
        """SUnion's state and every port's replica, last stable id and offset (``offsets`` if given) now."""
        node = self.node
        return InputPoint(
            self.sunion.state(),
            {p.stream: (p.replica, p.last_stable) for p in node.inputs.ports},
            offsets if offsets is not None else node.inputs.positions(),
        )


def _sparse(n: int) -> bool:
    """Whether the ``n``-th event of a kind is logged: the 1st, 10th, 100th, ... then every 10,000th,
    so a flood of bad input is seen without flooding the log (the metrics count every one)."""
    return n % 10_000 == 0 or (n < 10_000 and 10 ** len(str(n)) == 10 * n)


def _reason(e: Exception) -> str:
    """Why a message was rejected, in the words of the strict parsers."""
    if isinstance(e, (HeaderError, DecodeError, ContractError)):
        return str(e)
    return f"malformed input: {type(e).__name__}: {e}"
