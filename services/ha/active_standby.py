"""Active standby (ICDE 2005, section 5.3): the secondary processes the same input and holds its output.

The secondary reads the node's inputs as the primary does and runs the same operators, but
writes nothing: its results wait in an in-memory queue per output. Every ``interval_ms`` the
primary tells its secondaries which stable ids its log holds (a ``Trim`` message on the
control topic: the paper's queue-trimming message, sent once the log has them); a secondary
drops what is at or below them, so its queue holds about one interval of output. hastream's
nodes are deterministic (tuple-time merge, deterministic operators), so both replicas give
the same tuples under the same ids, and ids say which tuples the log already has: the
paper's high watermarks are not needed.

A replica joins as secondary (at the start, or rejoining after a failure) by rebuilding from
the primary's newest level-1 acknowledgement, as upstream backup's takeover does
(``services.ha.upstream_backup``): the primary takes those cuts for that purpose. Until it
has caught up, the partition is vulnerable (a primary failure then costs the rest of the
replay), which is the paper's window of vulnerability after a rejoin.

At a takeover the secondary writes to the log what its queue holds past the log's tail, each
tuple it had in common with the log checked against it, and goes on: no replay, so the
recovery takes only the detection and the order. A secondary that was behind drops what it
computes up to the tail, checked the same way. Under ``recovery: rollback`` it writes its
whole queue and whatever it computes, without reading the log: the tuples the log had since
the last trim message are repeated (``services.ha.scheme``).

Its replicas' heartbeats say what a recovery reads again, so the coordinator trims the logs no
further: the primary, its ack before the newest (a joining secondary rebuilds from an ack); a
secondary, where it reads each input and the first id it holds; a new primary, everything until
its own acks are out.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from services.control.messages import ControlMessage, RoleOrder, Trim
from services.control.states import Role
from services.core.tuples import BOUNDARY, STABLE
from services.dpc.soutput import Out, RestartMismatch, missing_from_log
from services.ha.scheme import HaScheme
from services.ha.upstream_backup import Acking
from services.log.logged import stable_after
from services.log.tail import output_tail
from services.node.merge import Admitted
from services.node.scheme import NodeRuntime

log = logging.getLogger(__name__)

# Results a secondary holds at most (ha-review D12): past them it stops reading its inputs until the
# primary's trim messages let it drop some (a primary that is stuck but not failed sends none), so
# its memory stays bounded; it reads on from there when it is told, or when it takes over.
MAX_HELD = 50_000


class ActiveStandbyScheme(HaScheme):
    wants_positions = True  # the cuts note where each input's log stands

    def __init__(self, node: NodeRuntime) -> None:
        super().__init__(node)
        self.acking = Acking(self, node.plan.ha.interval_ms)  # the cuts a joining secondary rebuilds from
        self.held: dict[str, deque[Out]] = {s: deque() for s in self.path.soutputs}  # a secondary's results
        self.logged: dict[str, int] = {s: -1 for s in self.path.soutputs}  # the last id the primary's log has, as told
        self.following = False  # a secondary reading the inputs
        self.trim_at = 0.0  # when the primary tells its secondaries next what its log holds
        self.reading: dict[str, int] = {}  # a secondary: where it reads each input (what it still needs)

    # -- the secondary -----------------------------------------------------------------
    def on_secondary(self) -> dict[str, int] | None:
        if self.following:
            return None  # the order again: it follows already
        self.following = True
        offsets = self.acking.rebuild(write=False)
        self.reading = dict(offsets)
        self.node.set_needs(self.reading)
        for s, last in self.acking.tails.items():  # what it computes up to there, the log has: not held
            self.logged[s] = last
        return offsets

    def on_control(self, msg: ControlMessage, now: float) -> None:
        node = self.node
        if isinstance(msg, Trim):
            # only its primary's, of the epoch it was told: a candidate's epoch is 0, and a replaced
            # primary's trims name ids its successor's log may never hold
            ours = msg.node == node.plan.node and msg.partition == node.partition
            if ours and self.following and self.role is Role.SECONDARY and msg.epoch == self.epoch:
                self._trim(msg.ids)
            return
        if isinstance(msg, RoleOrder) and msg.role == Role.SECONDARY and not self.following:
            if msg.is_for(node.plan.node, node.partition, node.replica):
                self.reads_back_all()  # what it will hold and read is not known until it rebuilds
        super().on_control(msg, now)

    def _trim(self, ids: dict[str, int]) -> None:
        """Drop the held results the primary's log has (ids up to ``ids[s]``, and the boundaries before)."""
        for s, last in ids.items():
            q = self.held.get(s)
            if q is None or last <= self.logged[s]:
                continue
            self.logged[s] = last
            while q and q[0][1] <= last:
                q.popleft()

    def _hold(self) -> None:
        """A secondary keeps what it would write and the primary's log does not have yet, and says from
        which id its takeover would read the log back (``keeps``)."""
        node, keeps = self.node, {}
        for s, q in self.held.items():
            out = node.outputs.queue(s)
            if out:
                logged = self.logged[s]
                q.extend(e for e in out if e[1] > logged)
                out.clear()
            keeps[s] = next((e[1] for e in q if e[0] is STABLE), self.path.soutputs[s].next_id)
        node.set_keeps(keeps)
        held = sum(map(len, self.held.values()))
        node.set_standby(held=held)
        if held >= MAX_HELD or (node.inputs.held and held > MAX_HELD // 2):
            if not node.inputs.held:
                log.warning("holding %d results the primary's log does not have: reading no input until it does", held)
            node.inputs.hold(True)
        else:
            node.inputs.hold(False)

    def before_batch(self, batch: Admitted, now: float) -> None:
        if batch.positions:
            self.acking.note_reads(batch.positions)
            if self.role is Role.SECONDARY and self.following:
                self.reading.update(batch.positions)
                self.node.set_needs(self.reading)

    def after_batch(self, now: float, idle: bool) -> None:
        if self.role is Role.PRIMARY:
            self._send_trim()  # first: the loop has flushed everything numbered so far
        self.acking.publish_pending()
        super().after_batch(now, idle)
        if self.role is not Role.PRIMARY and self.following:
            self._hold()

    def on_check(self, now: float) -> None:
        super().on_check(now)
        if self.role is not Role.PRIMARY and self.following:
            self._hold()

    # -- the primary -------------------------------------------------------------------
    def _send_trim(self) -> None:
        """Every interval, what the log holds: the loop flushed everything numbered before this batch."""
        now = time.monotonic()
        if now < self.trim_at:
            return
        self.trim_at = now + self.acking.interval_s
        node = self.node
        ids = {s: so.last_stable for s, so in self.path.soutputs.items()}
        node.send_control(Trim(node.plan.node, node.partition, node.replica, epoch=self.epoch, ids=ids))

    def on_promote(self) -> dict[str, int] | None:
        self.node.inputs.hold(False)  # a primary reads on: what it holds goes to the log now
        self.node.set_standby()
        if not self.following:  # made primary before it followed (a deployment's first start): rebuild
            return self.acking.rebuild(write=True)
        node = self.node
        bootstrap, part = node.settings.bootstrap, node.partition
        for s, so in self.path.soutputs.items():
            topic = node.outputs.topic(s)
            last, bound = output_tail(bootstrap, topic, part)
            q, out = self.held[s], node.outputs.queue(s)
            ids = [e[1] for e in q if e[0] is STABLE]
            check = self.precise and bool(ids) and ids[0] <= last  # rollback writes the log's tail again
            logged = stable_after(bootstrap, topic, part, ids[0] - 1) if check else {}
            for e in q:
                ttype, tid, stime, payload = e
                if ttype is STABLE and tid <= last and self.precise:
                    if tid not in logged:
                        raise missing_from_log(f"{topic}[{part}]", tid, tid, logged)
                    if logged[tid] != (stime, payload):
                        raise RestartMismatch(
                            f"{topic}[{part}]: the standby holds stable tuple {tid} as {payload!r} at {stime}, the log "
                            f"{logged.get(tid)!r}: the replicas did not compute the same output"
                        )
                elif ttype is STABLE or (ttype is BOUNDARY and stime > bound):
                    out.append(e)
            q.clear()
            so.boundary_sent = max(so.boundary_sent, bound)
            if so.last_stable < last:  # behind the old primary: what it computes up to the tail is in the log
                self.resume.skip_written(s, last, undo=False)
        self.acking.next_cut = 0.0  # its first cut as primary at its first step: a secondary's cuts set no pace
        self.acking.published = None
        self.reads_back_all()  # a secondary that joins now rebuilds from the old primary's last ack, until its own
        log.info("took over from the standby's queue: %s", {s: len(node.outputs.queue(s)) for s in self.held})
        return None
