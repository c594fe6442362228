"""What every HA scheme (ICDE 2005) does in the node's scheme slot: roles, takeover, stable processing.

A node of an HA scheme has a primary and secondaries, decided by the coordinator
(``services.coordinator.takeover``), which sends each replica its role and the partition's
epoch (a ``RoleOrder`` message). A replica starts as a *candidate*: it writes
nothing and waits for its order. The primary alone writes the node's outputs; with a one-log
scheme (``Scheme.one_log``) that is one topic per stream, which a takeover continues:

1. the new primary announces the epoch it was given on every output (an EPOCH tuple), so
   readers drop whatever the old primary, paused and woken up, writes after it;
2. the scheme sets its state and outputs and says where its inputs start (``on_promote``):
   amnesia goes on where the log stands (``continue_log``: ids after the last stable one,
   no result below the last boundary, which readers hold the stream to); passive standby
   restores the last checkpoint, upstream backup rebuilds from an acknowledgement, active
   standby writes what it holds.

What a takeover regenerates of the log's tail is where the recovery types part (section 3.1).
Under ``recovery: precise`` the new primary drops it, each tuple checked against the one the
log holds under its id: the log reads as the failure-free run's. Under ``recovery: rollback``
it writes it again without reading the log back: the log then holds *repeating* duplicates,
exact copies under the same ids, about one interval of output per failure (the paper's
Delta), and saves the read of the log's tail. hastream's readers (nodes, ``StreamView``,
``hastream tail``) drop a stable id they have, so what they take is precise either way; an
application reading the log raw sees the duplicates.

A primary that is told it is secondary was failed by the coordinator and replaced: it stops
(``FencedError``) and its restart rejoins as a secondary, as the paper's returning node does.

Processing is the stable path every scheme composes (``services.node.path``) without DPC's
tentative half: SUnion merges the inputs in tuple-time order and never stops waiting for a
missing input (an upstream failure is recovered by the upstream node's own scheme), the
operators run, SOutput numbers the results and sends BOUNDARY, so a node of any scheme may read
the output. The operators' time moves to bucket starts only, so a cut taken right after the
operators reached one (upstream backup's acknowledgements, ``services.ha.acks``) splits the
output at the same place in every run of the same input, whatever the polls and the
boundaries' timing did: the windows ending up to it and the buckets before it on one side, the
rest on the other.

``HaScheme`` is that shared machinery, held together from the node's parts (intake, stable
path, resume); it is no scheme of its own. Each HA scheme says where its inputs start when it
becomes primary or secondary (``on_promote``, ``on_secondary``) and adds what it does besides.
"""

from __future__ import annotations

import logging
import time

from services.control.messages import ControlMessage, ordered_role
from services.control.states import NodeState, Role
from services.dpc.soutput import SOutput
from services.dpc.sunion import SUnion
from services.log.tail import output_tail
from services.node.merge import Admitted, InputMoved
from services.node.path import StablePath
from services.node.resume import Resume
from services.node.scheme import NodeRuntime
from services.spec.model import Recovery

log = logging.getLogger(__name__)

# A takeover's reads of Kafka (checkpoints, acks, the log's tail) may outlast the detection time on
# a loaded machine; heartbeats go on through them, this long at most, so the coordinator does not
# fail the new primary for them. A kill or a SIGSTOP still stops every heartbeat at once. A takeover
# hung longer (a read that never returns) is failed over after it: a takeover's reads take well under
# a second on an idle machine, a few on a loaded one.
TAKEOVER_S = 5.0


class HaScheme:
    """The part every HA scheme shares; a scheme says where its inputs start when it takes over (``on_promote``)."""

    # An ack or a trim published at the start of a batch says the output numbered before it is
    # written: the loop waits for every batch it writes.
    overlap_writes = False
    wants_positions = False  # see ``RecoveryScheme``
    takes_tentative = False  # its guarantee is for stable input: it waits for a DPC upstream's corrections

    def __init__(self, node: NodeRuntime) -> None:
        self.node = node
        plan = node.plan
        self.dpc = plan.dpc
        # Checkpoints, acks and trims cut the input at bucket starts, and a takeover replays to such a
        # cut: every input, one too, goes through SUnion's buckets; never tentative: wait for the input.
        inf = float("inf")
        sunion = SUnion(len(plan.inputs), self.dpc.bucket, inf, self.dpc.failure_policy, self.dpc.max_kept, inf)
        self.path = StablePath(node, sunion, {o.stream: SOutput() for o in plan.outputs}, at_bucket_starts=True)
        self.restart_topic = plan.restart_topics[node.replica]
        self.precise = plan.ha.guarantee is Recovery.PRECISE  # else a takeover repeats the log's tail
        self.resume = Resume(node, self.path, precise=self.precise)
        self.role = Role.CANDIDATE
        self.epoch = 0
        self.recovering = False
        self.catch_up: dict[str, tuple[int, int]] | None = None  # the input ends a takeover reads up to
        self.promoted_at = 0.0  # when it took its current role: a recovery's time counts from it

    # -- the slot ---------------------------------------------------------------------
    def on_restart(self) -> dict[str, int] | None:
        """A replica (re)starts as a candidate, reading nothing until the coordinator's order."""
        self.node.set_role(Role.CANDIDATE.value, 0)
        self.node.set_state(NodeState.STABLE)
        return None

    def before_batch(self, batch: Admitted, now: float) -> None:
        pass  # the node's intake admitted the batch into ``path``

    def on_input_move(self, moved: InputMoved, now: float) -> None:
        pass  # the intake has applied the switching rule to the tuples held

    def on_control(self, msg: ControlMessage, now: float) -> None:
        node = self.node
        order = ordered_role(msg, node.plan.node, node.partition, node.replica, self.role, self.epoch)
        if order is None:
            return
        role, epoch = order
        if role is Role.PRIMARY:
            self._promote(epoch)
        else:
            self.role, self.epoch = Role.SECONDARY, epoch
            node.set_role(Role.SECONDARY.value, epoch)
            self.promoted_at = time.monotonic()
            with node.working(TAKEOVER_S):
                self._read_from(self.on_secondary())

    def after_batch(self, now: float, idle: bool) -> None:
        self.path.step(now)
        if self.recovering and self.role is not Role.CANDIDATE:
            self._check_recovered()  # after every batch: the recovery time is measured by it

    def on_check(self, now: float) -> None:
        if self.role is Role.PRIMARY:
            self.node.intake.tick_raw(now)
            self._lift_floors()

    def on_stop(self) -> None:
        if self.role is Role.PRIMARY:
            self.path.flush()

    def progress(self) -> tuple[int, int]:
        return self.path.progress()

    # -- takeover ---------------------------------------------------------------------
    def reads_back_all(self) -> None:
        """Say that a recovery may read every log back from its start: the coordinator trims none of them."""
        node = self.node
        node.set_keeps({s: 0 for s in self.path.soutputs})
        node.set_needs({p.topic: 0 for p in node.inputs.ports})

    def _promote(self, epoch: int) -> None:
        node = self.node
        self.promoted_at = time.monotonic()
        node.begin_writing(epoch)  # first: what the old primary writes after this is dropped by readers
        # Its heartbeats say primary from here on, also while it takes over: until the takeover says from
        # where it would read back, everything (what it reported as a secondary is no primary's point)
        self.reads_back_all()
        self.role, self.epoch = Role.PRIMARY, epoch
        node.set_role(Role.PRIMARY.value, epoch)
        log.info("primary at epoch %d", epoch)
        with node.working(TAKEOVER_S):
            offsets = self.on_promote()
            self._read_from(offsets)
        if offsets is not None:  # what its own takeover would read back, until it says a newer point
            node.set_keeps({s: so.next_id for s, so in self.path.soutputs.items()})
            node.set_needs({p.topic: max(offsets.get(p.topic, 0), 0) for p in node.inputs.ports})
        if not self.recovering:  # it had the state already (an active standby): nothing to rebuild
            log.info("primary caught up in %.0f ms", (time.monotonic() - self.promoted_at) * 1000)

    def _read_from(self, offsets: dict[str, int] | None) -> None:
        """Start the inputs at ``offsets`` (None: go on as they are); recovering until they are read
        up to where they end now."""
        if offsets is None:
            return
        node = self.node
        node.inputs.read_from(offsets)
        self.recovering = True
        self.catch_up = node.inputs.ends()
        node.set_state(NodeState.RECOVERING)

    def _check_recovered(self) -> None:
        """The takeover is over once the new primary has read its inputs up to where they ended when it
        took over, past any replay it drops: the old primary's state is rebuilt (heartbeats say STABLE)."""
        node = self.node
        if self.path.resume_at is not None or self.path.deduplicating():
            return
        if self.catch_up is not None and not node.inputs.reached(self.catch_up):
            return
        self.recovering = False
        node.set_state(NodeState.STABLE)
        log.info("%s caught up in %.0f ms", self.role.value, (time.monotonic() - self.promoted_at) * 1000)

    def continue_log(self) -> None:
        """Go on where each output log stands: ids after its last stable one, nothing below its last
        boundary (a scheme that does not regenerate what the log holds: amnesia)."""
        node = self.node
        for s, so in self.path.soutputs.items():
            last, bound = output_tail(node.settings.bootstrap, node.outputs.topic(s), node.outputs.kafka_partition(s))
            so.next_id = so.next_tentative = last + 1
            so.boundary_sent = bound
            so.floor = bound if bound >= 0 else None

    def _lift_floors(self) -> None:
        """Once the operators' time has passed an output's floor, its results are all above it."""
        if self.path.advanced is None:
            return
        for so in self.path.soutputs.values():
            if so.floor is not None and self.path.advanced >= so.floor:
                so.floor = None

    # -- what a scheme decides --------------------------------------------------------
    def on_promote(self) -> dict[str, int] | None:
        """Where the inputs start when this replica becomes primary (by topic); None: where they are."""
        raise NotImplementedError

    def on_secondary(self) -> dict[str, int] | None:
        """Where the inputs start when this replica becomes secondary (by topic); None: read nothing."""
        return None
