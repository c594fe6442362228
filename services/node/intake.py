"""Taking a node's input in, below its recovery scheme: each message admitted once, by the DPC
reader contract (``services.dpc.contract``), into the scheme's merge (``services.node.merge``).

Per message: its ``ht`` header is read and gated by the writer's epoch (a replaced upstream
writer's messages are dropped, a source's older writer rejected); stable tuples are taken once
each, in id order, and a gap in the ids makes the port read the gap again; tentative tuples
count only if they are news (rules 3 and 4 of the paper's switches); BOUNDARY, UNDO and
REC_DONE act on the merge and the port. An ingress's raw records become stable tuples numbered
by offset. A message that cannot be read goes to the dead-letter topic with the reason.

One input in order, no failure and no second replica read: its next stable tuple, the usual
message, goes straight to the operators (``Ordering.direct``), past the merge's buckets.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Message

from services.core.errors import ContractError, DecodeError, HeaderError
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
)
from services.dpc import contract
from services.dpc.contract import Verdict
from services.dpc.switching import Move
from services.node.ingress import RawReader
from services.node.merge import Admitted, InputMoved, Ordering
from services.node.ports import InputPort
from services.node.scheme import NodeRuntime

log = logging.getLogger(__name__)

_DUPLICATE = object()  # in place of a record: a stable tuple the port has, read again
# What a message is once read: type, id, stime, the boundary riding on it, the record, t_max.
_Read = tuple[TupleType, int, int, int | None, Any, int]

STALE = "stale tentative"  # NodeStats.skipped key
FENCED = "fenced"  # NodeStats.skipped key: messages of a replaced upstream writer
AWAITED = "tentative, awaiting stable"  # NodeStats.skipped key: tentative input a node takes only stable


class Intake:
    """Admits one node replica partition's input messages into its scheme's merge (``Ordering``)."""

    def __init__(self, node: NodeRuntime, path: Ordering, positions: bool = False, tentative: bool = True) -> None:
        """``positions``: the scheme asks where each input's log stands after every poll (``Admitted``)
        and each tuple's offset there (``STuple.offset``): every tuple then goes through the merge.
        ``tentative``: a DPC upstream's tentative tuples reach the merge (else they are passed over:
        not yet arrived, the stable stream that replaces them is awaited)."""
        self.node, self.path, self.positions, self.tentative = node, path, positions, tentative

    def take(self, msgs: list[Message], now: float) -> Admitted:
        """Hand each message to the merge by type (or straight on, ``_in_order``); malformed ones go to
        the dead-letter topic. Returns what the scheme sees of the batch."""
        path = self.path
        if path.merge.in_order and not path.failed and not self.positions and self.node.inputs.ports[0].fresh is None:
            self._in_order(msgs, now)
        else:
            self._each(msgs, now)
        self.node.stats.consumed += len(msgs)
        return Admitted(len(msgs), self._positions(msgs) if self.positions and msgs else {})

    def _positions(self, msgs: list[Message]) -> dict[str, int]:
        """Each input topic a port reads that this poll read: the offset after its last message read."""
        by_topic = self.node.inputs.by_topic
        left, out = len(by_topic), {}
        for m in reversed(msgs):
            topic = m.topic() or ""
            if topic in by_topic and topic not in out:
                out[topic] = (m.offset() or 0) + 1
                if len(out) == left:
                    break
        return out

    def _in_order(self, msgs: list[Message], now: float) -> None:
        """One input in order and no failure: its next stable tuple, the usual message, goes straight
        to the operators (``direct``, no bucket to wait in); any other message through ``_take`` to
        the merge, and the rest of the batch after it, so the input's order holds (``after_batch`` runs
        ``direct`` first)."""
        su, port, append = self.path.merge, self.node.inputs.ports[0], self.path.direct.append
        topic, gate, decode, bounds = port.topic, port.gate, port.decode, su.boundaries
        if port.gap is not None or port.tmax is not None or su.pending:
            self._each(msgs, now)
            return
        last, high, bound = port.last_stable, su.high, bounds[0]  # kept in locals: written back before _take
        if not self.path.direct:
            self.path.direct_first = last + 1
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
                self._each([m], now)  # the general path, which also says why a message is bad
                if port.gap is not None or port.tmax is not None or su.pending:
                    self._each(msgs[i + 1 :], now)  # the merge's buckets keep the input's order from here
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

    def _each(self, msgs: list[Message], now: float) -> None:
        """Each message by the reader contract. Only reading the message may fail as bad input (dead-
        lettered with the reason); what the merge then does with good input runs outside that net, so
        a bug in it stops the node instead of passing for malformed input."""
        node = self.node
        su, by_topic, positions = self.path.merge, node.inputs.by_topic, self.positions
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
                    got = self._raw(port, port.raw, m, now)
                else:
                    got = self._read(port, fresh, m, bounds)
            except (HeaderError, DecodeError, KeyError, TypeError, ValueError) as e:
                self._bad(m, e)
                continue
            if got is None:
                continue
            t, tid, stime, carried, rec, tm = got
            i = port.index
            if t is STABLE or t is TENTATIVE:
                if rec is _DUPLICATE:
                    if carried is not None:  # the boundary after it may be news: replicas' stable streams agree
                        su.boundary(i, carried, now)
                    continue
                su.push(i, t, tid, stime, rec, now, tm, (m.offset() or 0) if positions else -1)
                if t is STABLE:
                    port.last_stable = tid
                    if carried is not None:  # a BOUNDARY rode on the tuple
                        su.boundary(i, carried, now)
            elif t is BOUNDARY:
                su.boundary(i, stime, now)
            elif not fresh:  # from the fresh replica only its new tuples count
                self._control(port, t)

    def _read(self, port: InputPort, fresh: bool, m: Message, bounds: list[int | None]) -> _Read | None:
        """``m`` as (type, id, stime, carried boundary, record, t_max) if it is news to ``port`` by the
        reader contract (``services.dpc.contract``), else None; a stable duplicate after a restart or a
        switch comes back as ``_DUPLICATE`` for the boundary it may carry. Raises on bad input,
        changing nothing in the merge."""
        verdict, got, tm = contract.judge(port, m.headers(), fresh, self._first_of_source(port, m))
        stats = self.node.stats
        if got is None:  # written by a replaced copy of the upstream replica
            if port.upstream is None:
                self._older_writer(port, m)  # a source has one writer: another one is rejected
            stats.skipped[FENCED] = stats.skipped.get(FENCED, 0) + 1
            return None
        t, tid, stime, carried = got
        if verdict is Verdict.CONTROL:
            return t, tid, stime, carried, None, NO_TIME
        bound = bounds[port.index]
        if t is TENTATIVE:
            if not self.tentative:
                stats.skipped[AWAITED] = stats.skipped.get(AWAITED, 0) + 1
                return None
            if verdict is not Verdict.NEW or (bound is not None and stime < bound):
                stats.skipped[STALE] = stats.skipped.get(STALE, 0) + 1
                return None
            tmax = NO_TIME if tm is None else tm
            port.tmax = tmax if port.tmax is None else max(port.tmax, tmax)
            if tid <= port.last_stable:  # the fresh replica's, behind this port
                return self._duplicate(port, t, tid, stime, carried, tmax)
            return t, tid, stime, carried, port.decode(m.value()), tmax
        if verdict is Verdict.DUPLICATE:
            return self._duplicate(port, t, tid, stime, carried, NO_TIME)
        if verdict is Verdict.GAP:
            if port.upstream is None:  # a source has one log and one writer: nothing to read again
                raise ContractError(f"tuple id {tid} jumps past {port.last_stable}: the source skipped ids")
            port.report_gap(tid)
            stats.gaps += 1
            return None
        if port.tmax is not None and port.fresh is None and tid == port.last_stable + 1:
            # Stable tuples past the tentative ones kept at a switch (rule 3): they replace them.
            self.replace_tentative(port)
        if bound is not None and stime < bound:
            raise ValueError(f"stime {stime} is below the input's boundary {bound}")
        return t, tid, stime, carried, port.decode(m.value()), NO_TIME

    @staticmethod
    def _duplicate(port: InputPort, t: TupleType, tid: int, stime: int, carried: int | None, tm: int) -> _Read:
        """A tuple the port has, after a restart or a switch: only the boundary it carries may be news.
        A source has one log and one writer: a duplicate there breaks its contract."""
        if port.upstream is None:
            raise ContractError(
                f"tuple id {tid} goes backwards (the stream is at {port.last_stable}): "
                "an input stream has one writer; feed it from several through an ingress"
            )
        return t, tid, stime, carried, _DUPLICATE, tm

    def _control(self, port: InputPort, t: TupleType) -> None:
        """UNDO or REC_DONE from the replica ``port`` follows."""
        node, i = self.node, port.index
        if t is UNDO:
            port.control(t)
            if port.fresh is None:
                self.replace_tentative(port)
            else:  # the tuples not processed yet are the fresh replica's: it voids those processed
                self.path.merge.undo(i, pending=False)
                port.processed_tmax = None
            node.stats.undos_received += 1
        elif t is REC_DONE:
            port.control(t)  # its stream is stable again: no switch away from it is due
            if port.fresh is not None:
                node.inputs.end_fresh(port)  # corrected: the followed replica's stable stream goes on
                self.replace_tentative(port)
            else:
                skipped = node.stats.skipped
                skipped["REC_DONE"] = skipped.get("REC_DONE", 0) + 1

    def _bad(self, m: Message, e: Exception) -> None:
        """Dead-letter ``m`` with the reason ``e`` gives."""
        node = self.node
        reason = _reason(e)
        node.deadletter(m, reason)
        node.stats.deadlettered += 1
        if _sparse(node.stats.deadlettered):
            log.warning(
                "dead-lettered %s[%d]@%d: %s (%d so far)",
                m.topic(),
                m.partition(),
                m.offset(),
                reason,
                node.stats.deadlettered,
            )

    @staticmethod
    def _older_writer(port: InputPort, m: Message) -> None:
        """Reject a source message an older writer (or another client) wrote after the current writer began."""
        parse_headers(m.headers())  # no or malformed headers: that is the reason
        raise ContractError(
            f"written with writer epoch {peek(m.headers())[2]} after epoch {port.gate.epoch} began: "
            "an input stream has one writer; feed it from several through an ingress"
        )

    def _raw(self, port: InputPort, raw: RawReader, m: Message, now: float) -> _Read | None:
        """An ingress's raw record as a stable tuple (its id its offset), or a tick as a boundary;
        the input's boundary follows the newest tuple time minus the lateness (``services.node.ingress``)."""
        raw.last_read = now
        off = m.offset() or 0
        if off <= port.last_stable:
            return None  # read again after a restart
        stime, rec = raw.read(m)
        if rec is None:
            return BOUNDARY, off, stime, None, None, NO_TIME
        bound = self.path.merge.boundaries[port.index]
        if bound is not None and stime < bound:
            raise ContractError(
                f"late: tuple time {stime} is {bound - stime} ms behind the stream's boundary {bound} "
                f"(the newest tuple time minus the lateness of {raw.lateness} ms)"
            )
        return STABLE, off, stime, stime - raw.lateness, rec, NO_TIME

    def tick_raw(self, now: float) -> None:
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

    def replace_tentative(self, port: InputPort) -> None:
        """The port's stable stream replaces the tentative tuples it holds (rule 2)."""
        self.path.merge.undo(port.index)
        port.tmax = port.skip_upto = port.processed_tmax = None

    def on_input_move(self, port: InputPort, move: Move, now: float) -> InputMoved:
        """The port changed what it reads (``services.dpc.switching.Move``). Moving to a stable replica
        replaces its tentative tuples; moving to one in a failure keeps them (rule 3), as does
        reading a fresh replica besides a reconciling one (rule 4) until that one is done, except
        those not processed yet: the fresh replica sends them again. Returns what the scheme sees."""
        replaced = move in (Move.STABLE, Move.GAP, Move.END_FRESH)
        if replaced:
            self.replace_tentative(port)
        elif move is Move.FRESH:  # the reconciling replica's tuples not processed yet are void
            self.path.merge.undo(port.index, kept=False)
        if move is not Move.END_FRESH:
            self.node.stats.switches += 1
        return InputMoved(port.stream, port.replica, keeps_tentative=not replaced)


def _sparse(n: int) -> bool:
    """Whether the ``n``-th event of a kind is logged: the 1st, 10th, 100th, ... then every 10,000th,
    so a flood of bad input is seen without flooding the log (the metrics count every one)."""
    return n % 10_000 == 0 or (n < 10_000 and 10 ** len(str(n)) == 10 * n)


def _reason(e: Exception) -> str:
    """Why a message was rejected, in the words of the strict parsers."""
    if isinstance(e, (HeaderError, DecodeError, ContractError)):
        return str(e)
    return f"malformed input: {type(e).__name__}: {e}"
