"""CEC's foreground and background paths: one operator's results with its parts' footprints (CEC §III).

The operator runs one input tuple at a time, each at its input position (its ``t_now``). As it
goes, the checkpointer turns what its parts do into output records, in the order they happen:

- a part opens: a CEC_OPEN record with the part's state once the opening tuple is in it;
- a part closes: its result, the footprint that says it is closed;
- between batches, inside the policy's slots (``services.cec.intensity``): CEC_CHECK records of
  the parts with the oldest footprints while the extent or the replay is past its target.

Every record is stamped with N (the parts open after the tuple), the tuple's position and the
record's sequence number (``services.cec.footprints.Mark``), so a recovery can rebuild the
operator from the log's tail alone (``services.cec.scan``). After ``load``, ``push`` replays the
input from the eventual checkpoint's start under the corrected duplicate rule (the digest's
§1.10): a tuple at or before the log's tail goes only into the parts of the checkpoint whose
footprint it is after; every other is already in the log, as a footprint's state or a result.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable

from services.cec.footprints import Footprints, Kind, Mark, WinId
from services.cec.intensity import Intensity
from services.cec.scan import Eventual
from services.operators.base import Emit, Item
from services.operators.parts import PartId

Out = tuple[Mark, Any]  # a result (record, stime), or a footprint's pickled (part id, part state)


class Checkpointer:
    """Feeds ``op`` (an operator with state parts, one input) and writes its output log's records."""

    def __init__(self, op: Any, intensity: Intensity) -> None:
        self.op, self.intensity = op, intensity
        self.fp = Footprints()
        self.ids: dict[PartId, WinId] = {}  # open parts: the operator's id -> the log's
        self.pids: dict[WinId, PartId] = {}
        self.pos = -1  # input position of the last tuple processed (t_now)
        self.stime = 0  # and its stime
        self.seq = 0  # the next record's sequence number
        self.checks = 0  # CEC_CHECK records written
        self.next_slot = 0  # when the next checkpoint slot may start (monotonic ms)
        self.tail = -1  # after ``load``: the log's tail position; tuples up to it are replayed
        self.since: dict[WinId, int] = {}  # after ``load``: each loaded part's footprint position
        self._events: list[tuple[Kind, WinId, PartId]] = []
        self._results: list[Item] = []
        self._opened = 0  # parts the current tuple opened so far
        self.resume()

    # -- foreground -------------------------------------------------------------------------------
    def push(self, pos: int, items: list[Item]) -> list[Out]:
        """``items``, the input tuples at positions ``pos``, ``pos + 1``, ...: the records they make."""
        out: list[Out] = []
        op, tail, events, results = self.op, self.tail, self._events, self._results
        push = op.push
        for i, item in enumerate(items):
            at = pos + i
            self.pos, self.stime, self._opened = at, item[1], 0
            if at <= tail:  # a replay: only into the loaded parts whose footprint lacks it
                op.admit = self._admit
                push(0, [item])
                op.admit = None
                if events or results:
                    raise AssertionError(f"replayed tuple at {at} made records: the log holds them already")
                continue
            push(0, [item])
            if events or results:
                self._records(out)
        return out

    def advance(self, stime: int) -> list[Out]:
        """A time promise: what it closes, stamped with the last tuple's position."""
        self.op.advance(stime)
        return self.collect()

    def collect(self) -> list[Out]:
        """The records of what the operator did since the last tuple pushed (its time was moved on)."""
        out: list[Out] = []
        self._records(out)
        return out

    def pause(self, emit: Emit) -> None:
        """Stop recording: the operator's results go to ``emit``, its parts change unwatched until ``resume``
        (a DPC failure's tentative processing, which its reconciliation rolls back to the parts as they were)."""
        self.op.watch(None, None)
        self.op.emit = emit

    def resume(self) -> None:
        """Record again: the operator's parts are back where ``pause`` found them."""
        self.op.watch(self._on_open, self._on_close)
        self.op.emit = self._results.extend

    def _on_open(self, pid: PartId, stime: int) -> None:
        win = (self.pos, self._opened)
        self._opened += 1
        self.ids[pid], self.pids[win] = win, pid
        self._events.append((Kind.OPEN, win, pid))

    def _on_close(self, pid: PartId, stime: int) -> None:
        win = self.ids.pop(pid)
        del self.pids[win]
        self._events.append((Kind.RESULT, win, pid))

    def _state(self, pid: PartId) -> bytes:
        return pickle.dumps((pid, self.op.part(pid)), protocol=pickle.HIGHEST_PROTOCOL)

    def _records(self, out: list[Out]) -> None:
        """The current tuple's events as records, in the order they happened, each result with its part's
        close. An opened part's state is taken now, once the tuple is processed (it is the state after its
        opening tuple); a part the same tuple opened and closed needs no CEC_OPEN: its result follows it in
        the same batch, and a scan passes over what comes before a part's result."""
        events = self._events
        if len(events) == 1 and len(self._results) == (events[0][0] is Kind.RESULT):  # the usual tuple: one event
            self._one(events[0], out)
            return
        if not events and not self._results:
            return
        if len(events) > 1:
            shut = {win for kind, win, _ in events if kind is Kind.RESULT}
            events = [e for e in events if e[0] is Kind.RESULT or e[1] not in shut]
        fp, seq = self.fp, self.seq
        for kind, win, _ in events:
            if kind is Kind.OPEN:
                fp.left(win, seq, self.pos)
            else:
                fp.closed(win)
            seq += 1
        n, xs, results = len(self.ids), fp.start(seq - 1), iter(self._results)  # none open: its last record
        for kind, win, pid in events:
            mark = Mark(kind, win, n, self.pos, self.stime, self.seq, xs)
            out.append((mark, self._state(pid) if kind is Kind.OPEN else next(results)))
            self.seq += 1
        if next(results, None) is not None:
            raise AssertionError(f"operator '{self.op.name}' emitted a result of no part it closed")
        self._events.clear()
        self._results.clear()

    def _one(self, event: tuple[Kind, WinId, PartId], out: list[Out]) -> None:
        """``_records`` of a tuple that opened or closed one part."""
        kind, win, pid = event
        fp, seq = self.fp, self.seq
        payload: Any
        if kind is Kind.OPEN:
            fp.left(win, seq, self.pos)
            payload = self._state(pid)
        else:
            fp.closed(win)
            payload = self._results[0]
            self._results.clear()
        out.append((Mark(kind, win, len(self.ids), self.pos, self.stime, seq, fp.start(seq)), payload))
        self.seq = seq + 1
        self._events.clear()

    # -- background ---------------------------------------------------------------------------
    def background(self, now_ms: int, clock: Callable[[], int] | None = None) -> list[Out]:
        """In the period's slot (the first call in each period of ``cp_ms``): CEC_CHECK records of the
        oldest footprints while the policy asks for them, each part once at most, and (``clock``:
        monotonic ms) for ``ci_ms`` at most."""
        out: list[Out] = []
        it, fp = self.intensity, self.fp
        if self.pos <= self.tail or now_ms < self.next_slot:
            return out
        self.next_slot, end = it.next_period(now_ms), now_ms + it.ci_ms
        for _ in range(len(fp)):
            win = fp.oldest()
            if win is None or not it.over(fp.q(self.seq), fp.u(self.pos)):
                break
            if clock is not None and clock() >= end:
                break
            state = self._state(self.pids[win])
            fp.left(win, self.seq, self.pos)
            out.append((Mark(Kind.CHECK, win, len(fp), self.pos, self.stime, self.seq, fp.start(self.seq + 1)), state))
            self.seq += 1
            self.checks += 1
        return out

    # -- recovery -------------------------------------------------------------------------------
    def load(self, ec: Eventual) -> int:
        """Load the eventual checkpoint's parts into the (empty) operator; returns the input position
        the replay starts after (T)."""
        for win, (mark, state) in sorted(ec.parts.items(), key=lambda kv: kv[1][0].seq):
            pid, part = pickle.loads(state)
            self.op.load_part(pid, part)
            self.ids[pid], self.pids[win] = win, pid
            self.fp.left(win, mark.seq, mark.pos)
            self.since[win] = mark.pos
        self.pos, self.seq, self.tail = ec.start, ec.next_seq, ec.tail_pos
        return ec.start

    def _admit(self, pid: PartId) -> bool:
        """Whether the replayed tuple at ``pos`` (at or before the tail) goes into part ``pid``."""
        win = self.ids.get(pid)
        return win is not None and self.pos > self.since.get(win, self.tail)
