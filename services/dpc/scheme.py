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

from services.control.messages import ControlMessage
from services.control.states import NodeState
from services.core.tuples import NO_TIME
from services.dpc.buckets import STuple
from services.dpc.consistency import policy_while_partner_reconciles
from services.dpc.reconciler import reconciler
from services.dpc.round import Round
from services.dpc.soutput import SOutput
from services.dpc.states import check_transition
from services.dpc.sunion import SUnion
from services.node.merge import Admitted, InputMoved
from services.node.path import StablePath
from services.node.resume import Resume
from services.node.scheme import NodeRuntime
from services.node.state import InputPoint, RecoveryPoint, build_store, input_point
from services.spec.policies import Policy

log = logging.getLogger(__name__)


class DpcScheme:
    # A node with one input takes it in its log order, without buckets (``services.dpc.sunion``).
    pass_through = True
    # The loop writes each batch without waiting for it (``Outputs.write``): what needs the output
    # acknowledged (a restart image, REC_DONE before DONE) flushes it first.
    overlap_writes = True
    wants_positions = False  # see ``RecoveryScheme``
    takes_tentative = True

    def __init__(self, node: NodeRuntime) -> None:
        self.node = node
        plan = node.plan
        self.dpc = plan.dpc
        sunion = SUnion(
            len(plan.inputs),
            self.dpc.bucket,
            plan.delay_s,
            self.dpc.failure_policy,
            self.dpc.max_kept,
            plan.hold_s,
            in_order=plan.in_order,
            early=True,
            precise=not plan.timed_merge,
        )
        self.path = StablePath(node, sunion, {o.stream: SOutput() for o in plan.outputs})
        self.path.on_tentative = self._tentative
        self.restart_topic = plan.restart_topics[node.replica]
        self.store = build_store(node, self.restart_topic, self.path)
        self.resume = Resume(node, self.path)
        self.reconciler = reconciler(plan.reconciliation, node.pipeline)
        self.state = NodeState.STABLE
        self.round = Round(node)
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
        image, offsets = self.resume.resume(self.store)
        if image is not None and image.failed:
            self._enter_failure(image.snapshot, offsets)  # still in the failure the image was taken in
        return offsets

    def on_stop(self) -> None:
        self.path.flush()  # what is decided goes out now, not after the restart
        self._write_image()
        self.store.wait()

    # -- input ------------------------------------------------------------------------
    def before_batch(self, batch: Admitted, now: float) -> None:
        pass  # the node's intake admitted the batch into ``path``

    def on_input_move(self, moved: InputMoved, now: float) -> None:
        pass  # the intake has applied the switching rule to the tuples held

    # -- processing --------------------------------------------------------------------
    def after_batch(self, now: float, idle: bool) -> None:
        self.path.step(now)

    def _tentative(self, tuples: list[STuple]) -> None:
        """A tentative bucket is about to run: the failure begins with the first one."""
        if not self.path.failed:
            self._enter_failure()
        self._note_processed(tuples)

    def _note_processed(self, tuples: list[STuple]) -> None:
        """Each port's highest t_max processed: what a fresh replica need not send again (rule 4)."""
        ports = self.node.inputs.ports
        for t in tuples:
            if t.tmax != NO_TIME:
                p = ports[t.port]
                if p.processed_tmax is None or t.tmax > p.processed_tmax:
                    p.processed_tmax = t.tmax

    def _enter_failure(self, snapshot: bytes | None = None, offsets: dict[str, int] | None = None) -> None:
        """First tentative input: remember the pre-failure state to come back to.

        SUnion's state and the input positions are remembered too (tuples, not clock
        readings): a failure that spills goes back to them to read its input again.
        """
        node = self.node
        self.path.flush()  # results decided on stable input are stable
        self.pre_failure = snapshot if snapshot is not None else node.pipeline.snapshot(node.tick)
        self.reconciler.begin(self.pre_failure)
        self.failure_start = self._input_point(offsets)
        self.start_imaged = False
        self.op_time_saved = self.path.op_time
        self.path.failed = True
        self._set_state(NodeState.UPSTREAM_FAILURE)
        log.warning("going tentative: waited for %s", self._waited_for())

    def _waited_for(self) -> str:
        """The inputs the merge waited for when it went tentative: those with no boundary yet, or the lowest."""
        bounds = self.path.sunion.boundaries
        low = min((b for b in bounds if b is not None), default=None)
        return ", ".join(
            f"{p.stream} ({'no boundary yet' if b is None else f'boundary {b}'})"
            for p, b in zip(self.node.inputs.ports, bounds, strict=True)
            if b is None or b == low
        )

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
        if not self.path.failed:
            for s, so in self.path.soutputs.items():
                so.rec_done(node.outputs.queue(s))
        self._set_state(self.state)
        log.info("caught up after the restart")

    def progress(self) -> tuple[int, int]:
        return self.path.progress()

    # -- reconciliation ----------------------------------------------------------------
    def on_control(self, msg: ControlMessage, now: float) -> None:
        self.round.on_control(msg)

    def _partners(self) -> list[NodeState]:
        """The other replicas' states, by replica number."""
        node = self.node
        states = node.monitor.states(node.plan.node, node.partition, node.plan.replicas)
        del states[node.replica]
        return states

    def on_check(self, now: float) -> None:
        self.node.intake.tick_raw(now)
        if self.recovering:
            self._check_caught_up()
        if self.replaying is not None:
            self._check_replayed()
        if self.path.sunion.spilled:
            self.reconciler.spill()
        self._check_reconciliation(now)
        self._image_if_due(now, self.dpc.restart_image_interval / 1000)

    def _deduplicating(self) -> bool:
        return self.path.deduplicating()

    def _image_if_due(self, now: float, interval_s: float) -> None:
        """A restart image every ``interval_s``, not while a replay is deduplicated."""
        if now < self.next_image or self._deduplicating():
            return
        self.next_image = now + interval_s
        if not self.store.busy and not (self.path.sunion.spilled and self.start_imaged):
            self._write_image()  # skipped while one is in flight, or a spilled failure's start is written

    def _check_reconciliation(self, now: float) -> None:
        partners = self._partners()
        pol = self.dpc.stabilization_policy
        self.path.sunion.policy = policy_while_partner_reconciles(partners, pol, self.dpc.failure_policy)
        if (
            self.path.failed
            and self.path.sunion.ready_to_reconcile(now)
            and self.round.turn(now, partners, pol is not Policy.SUSPEND)
        ):
            self._reconcile()

    def _reconcile(self) -> None:
        """Undo the tentative outputs, restore the pre-failure state, redo the corrected inputs.

        Only the settled kept buckets are redone. If an input failed again before the rest
        settled, the node is still in that failure: it takes its pre-failure state anew
        there and processes the remaining kept buckets tentatively again, so stable output
        keeps advancing under an input that goes down again and again.
        """
        node = self.node
        spilled = self.path.sunion.spilled
        if spilled and self.failure_start is not None:  # its input must still be in the logs
            sources = {p.topic for p in node.inputs.ports if p.upstream is None}  # upstream gaps are read elsewhere
            offsets = self.failure_start.offsets
            self.resume.check_retained({t: off for t, off in offsets.items() if t in sources}, redo=True)
        self._roll_back()
        if spilled:
            self._replay()
            return
        t0 = time.monotonic()
        redone = 0
        for bucket in self.path.sunion.redo_buckets():
            self.path.run(*bucket)
            redone += len(bucket[2])
            node.tick()
        self.path.advance()
        self.path.flush()  # the corrections, before REC_DONE
        still_failed = self.path.sunion.in_failure()
        self._end_round(rec_done=not still_failed)
        if still_failed:
            self._enter_failure()
            for bucket in self.path.sunion.rerun_buckets():
                self.path.run(*bucket)
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
        for s, so in self.path.soutputs.items():
            so.undo(queue(s))
        self.reconciler.rollback()
        self.path.op_time = self.op_time_saved
        self.path.failed = False
        self.pre_failure = None

    def _end_round(self, rec_done: bool) -> None:
        """The reconciliation is over: REC_DONE downstream (unless a failure goes on), DONE to the coordinator."""
        node = self.node
        if rec_done:
            for s, so in self.path.soutputs.items():
                so.rec_done(node.outputs.queue(s))
        node.outputs.flush()
        self.round.done()
        node.stats.reconciliations += 1

    def _replay(self) -> None:
        """Redo a spilled failure from the logs: SUnion and every input port go back to the
        failure's start (each port on the replica it reads now, right after the stable
        tuple it had then); the loop then processes the input again."""
        node, start = self.node, self.failure_start
        assert start is not None
        self.path.sunion.rewind(start.sunion, time.monotonic())
        node.inputs.rewind({s: last for s, (_, last) in start.ports.items()}, node.settings.bootstrap)
        self.failure_start = None
        self.replaying = node.inputs.ends()
        node.stats.replays += 1
        log.info("reconciling a spilled failure: reading the inputs again from where it began")

    def _check_replayed(self) -> None:
        """A spilled failure's redo ends when the inputs are read up to where they ended at the
        turn, or when the input fails again meanwhile (the node is in that new failure)."""
        assert self.replaying is not None
        if not self.path.failed and not self.node.inputs.reached(self.replaying):
            return
        self.replaying = None
        if not self.path.failed:
            self.path.flush()  # the corrections, before REC_DONE
        self._end_round(rec_done=not self.path.failed)
        if not self.path.failed:
            self._set_state(NodeState.STABLE)
        log.info("redo from the logs done%s", "; a new failure goes on" if self.path.failed else "")

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
        spilled = self.failure_start if self.path.sunion.spilled else None
        point = spilled or self._input_point()
        outputs = {s: so.state() for s, so in self.path.soutputs.items()}
        # A spilled failure restarts before it began, in the failure only if it began with kept buckets.
        failed = bool(point.sunion.kept) if spilled else self.pre_failure is not None
        self.store.take(RecoveryPoint(point, outputs, failed, self.pre_failure))
        self.start_imaged = spilled is not None

    def _input_point(self, offsets: dict[str, int] | None = None) -> InputPoint:
        return input_point(self.node, self.path.sunion, offsets)
