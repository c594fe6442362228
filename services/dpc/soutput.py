"""SOutput: the last operator on each output stream partition a node writes (Borealis DPC).

It numbers tuples (dense ids over stable tuples; tentative tuples continue after the
last stable id and are replaced later), and is the only place that decides which control
tuples a downstream reader sees:

- UNDO(L) when the node starts reconciling after it emitted tentative tuples: readers drop
  every tentative tuple after stable tuple L; the corrections follow as stable L+1, ...
- REC_DONE once reconciliation is done, and forced between the last stable tuple and the
  first tentative one if a new failure starts before that.
- BOUNDARY(B), with B never decreasing: no later tuple will have a smaller stime. When it
  follows a stable tuple in the same flush it rides on that tuple (``services.node.outputs``).

After a restart from a checkpoint, the node replays input it had already processed, so
SOutput is in duplicate-elimination mode: it drops the stable tuples whose ids are
already in the topic (up to ``dedup_until``), each after checking that it is the very
tuple the topic holds under that id (same time, same payload). A replay that regenerates
something else (its input was trimmed or rewritten) stops the node with
``RestartMismatch`` instead of renumbering the stream. It announces UNDO(L) at the
restart, since the topic may end with tentative tuples of the process that died.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.core.errors import RestartImageError
from services.core.tuples import BOUNDARY, REC_DONE, STABLE, TENTATIVE, UNDO, TupleType


class RestartMismatch(RestartImageError):
    """A restarted writer regenerated a stable tuple that differs from the one its topic holds."""


# (type, id, stime, record or None): one message to write. A TENTATIVE tuple's record is
# (record, t_max): the tuple time of the last input tuple processed before it (the paper's t_max).
Out = tuple[TupleType, int, int, Any]


class SOutput:
    def __init__(self, next_id: int = 0, boundary: int = -1) -> None:
        self.next_id = next_id  # id of the next stable tuple
        self.next_tentative = next_id
        self.boundary_sent = boundary
        self.dedup_until = -1  # stable ids <= this are already in the topic
        self.in_topic: Mapping[int, tuple[int, Any]] = {}  # what the topic holds of them: id -> (stime, payload)
        self.name = ""  # for errors: the topic
        self.tentative_sent = False  # tentative tuples emitted since the last UNDO
        self.rec_done_due = False  # an UNDO was sent and its REC_DONE not yet
        # A writer that took over a log (``services.ha.scheme``) drops stable results below the boundary
        # the log ends with: readers hold the stream to it. None: no such floor.
        self.floor: int | None = None
        self.below_floor = 0  # results dropped for it

    @property
    def last_stable(self) -> int:
        return self.next_id - 1

    def state(self) -> tuple[int, int]:
        """What a checkpoint keeps: ids continue from it after a restart."""
        return (self.next_id, self.boundary_sent)

    def restarted(self, last_in_topic: int, in_topic: Mapping[int, tuple[int, Any]], name: str = "") -> list[Out]:
        """Resume after a crash: replayed stable tuples up to ``last_in_topic`` are checked against
        ``in_topic`` (id -> (stime, payload) of every stable id from ``next_id`` on, looked up in
        increasing order: ``services.log.logged`` reads it as they come) and dropped; undo the rest."""
        self.dedup_until = last_in_topic
        self.in_topic, self.name = in_topic, name
        if last_in_topic >= self.next_id and self.next_id not in in_topic:  # the rest is checked as it comes
            found = min((i for i in in_topic if i > self.next_id), default=last_in_topic + 1)
            raise missing_from_log(name, self.next_id, min(found - 1, last_in_topic), in_topic)
        self.next_tentative = max(self.next_id, last_in_topic + 1)
        self.rec_done_due = True
        return [(UNDO, last_in_topic, 0, None)]

    @property
    def deduplicating(self) -> bool:
        return self.next_id <= self.dedup_until

    def stable(self, items: list[tuple[Any, int]], out: list[Out]) -> None:
        """Append the stable versions of ``items`` (record, stime) to ``out``."""
        if self.floor is not None:
            n, floor = len(items), self.floor
            items = [it for it in items if it[1] >= floor]
            self.below_floor += n - len(items)
        tid = self.next_id
        if tid <= self.dedup_until:  # replayed after a restart: already in the topic
            skip = min(len(items), self.dedup_until - tid + 1)
            self._check(items[:skip], tid)
            items = items[skip:]
            tid += skip
            if tid > self.dedup_until:
                self.in_topic = {}
        for rec, stime in items:
            out.append((STABLE, tid, stime, rec))
            tid += 1
        self.next_id = tid
        self.next_tentative = max(self.next_tentative, tid)

    def _check(self, items: list[tuple[Any, int]], first: int) -> None:
        in_topic = self.in_topic
        for i, (payload, stime) in enumerate(items):
            try:
                logged = in_topic[first + i]
            except KeyError:
                raise missing_from_log(self.name, first + i, first + i, in_topic) from None
            if logged != (stime, payload):
                have_stime, have = logged
                raise RestartMismatch(
                    f"{self.name}: the restart regenerated stable tuple {first + i} as {payload!r} at {stime}, "
                    f"but the topic holds {have!r} at {have_stime}: the replayed input is not what it was "
                    "(trimmed or rewritten), so the node stops rather than renumber its output"
                )

    def tentative(self, items: list[tuple[Any, int]], out: list[Out], tmax: int = -1) -> None:
        """Append ``items`` (record, stime) as tentative tuples carrying ``tmax``."""
        if not items:
            return
        if self.deduplicating:
            return  # the topic already holds stable tuples past these: they would be undone anyway
        if self.rec_done_due:
            self.rec_done(out)  # a new failure before the last one was closed: close it first
        if not self.tentative_sent:
            self.next_tentative = self.next_id
        tid = self.next_tentative
        for rec, stime in items:
            out.append((TENTATIVE, tid, stime, (rec, tmax)))
            tid += 1
        self.next_tentative = tid
        self.tentative_sent = True

    def undo(self, out: list[Out]) -> None:
        """Reconciliation starts: retract the tentative tuples, if any were sent."""
        if self.tentative_sent:
            out.append((UNDO, self.last_stable, 0, None))
            self.tentative_sent = False
            self.rec_done_due = True
        self.next_tentative = self.next_id

    def rec_done(self, out: list[Out]) -> None:
        """Reconciliation finished and the node caught up."""
        if self.rec_done_due:
            out.append((REC_DONE, self.last_stable, 0, None))
            self.rec_done_due = False

    def boundary(self, stime: int, out: list[Out]) -> None:
        if stime > self.boundary_sent and not self.deduplicating and not self.tentative_sent:
            out.append((BOUNDARY, self.last_stable, stime, None))
            self.boundary_sent = stime


def missing_from_log(name: str, first: int, last: int, in_topic: Mapping[int, object]) -> RestartMismatch:
    """The one line a restart stops with when stable ids ``first``..``last`` it must check are not in
    its log: trimmed past (the log starts after them), or lost."""
    if in_topic and last < min(in_topic):
        return RestartMismatch(
            f"{name}: stable tuples {first}..{last} are gone from the log (it now starts at stable id "
            f"{min(in_topic)}): it was trimmed past this writer's restart point, so a restart cannot tell "
            "what it already wrote"
        )
    return RestartMismatch(
        f"{name}: stable tuples {first}..{last} are missing from the topic, so a restart cannot tell what it already wrote"
    )
