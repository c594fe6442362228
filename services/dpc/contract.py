"""The DPC reader contract for one stream partition: what a reader takes of each message, once.

Every reader of a DPC stream, a node's input (``services.node.intake``) and a client's view
(``services.client.partition``) alike, reads a message's ``ht`` header once, through the
epoch gate of the connection it came on (a replaced writer's messages are dropped), and
judges it by what it holds:

- a STABLE tuple at or below the last stable id is a duplicate (after a restart or a switch);
  past the next id it leaves a gap, to read again, unless the reader takes any first id;
- a TENTATIVE tuple is news only if it is not from a reconciling replica while a fresh one
  supplies new tuples (rule 4), not something the reader has stably already, and past the
  t_max of the tentative tuples it held at a switch (rule 3), so none is received twice;
- BOUNDARY, UNDO and REC_DONE go to the reader to act on (of the fresh replica read for new
  tuples only, rule 4, a reader takes no UNDO or REC_DONE).

What a reader does with the verdict (decode, dead-letter, void its tentative tuples, events)
is its own; the verdicts are the same for both.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from services.core.tuples import STABLE, TENTATIVE, EpochGate, Head, RawHeaders, admit, tmax_of


class Reader(Protocol):
    """What the contract reads and keeps of one reader of one stream partition."""

    last_stable: int  # the last stable id taken (-1: none)
    skip_upto: int | None  # after a switch keeping them: tentative tuples up to this t_max are held
    fresh: int | None  # the replica new tentative tuples come from while the followed one reconciles
    gate: EpochGate  # the writer epochs of the followed replica's log
    fresh_gate: EpochGate  # and of the fresh replica's


class Verdict(Enum):
    FENCED = "fenced"  # a replaced writer wrote it
    NEW = "new"  # a data tuple to take
    DUPLICATE = "duplicate"  # a stable tuple the reader has
    GAP = "gap"  # a stable tuple past the next id: the ids between are to be read again
    RECONCILING = "reconciling"  # a tentative tuple of the reconciling replica while a fresh one supplies them
    STABLE_ALREADY = "stable already"  # a tentative tuple at or below the last stable id
    HELD = "held"  # a tentative tuple the reader held already when it switched
    CONTROL = "control"  # BOUNDARY, UNDO or REC_DONE: the reader acts on it


def judge(reader: Reader, headers: RawHeaders, fresh: bool, first_any: bool) -> tuple[Verdict, Head | None, int | None]:
    """(verdict, (type, id, stime, carried boundary), t_max of a tentative tuple) of one message
    read from the followed replica's log (``fresh``: from the fresh replica's). ``first_any``: the
    reader takes any id as its first stable tuple. Raises HeaderError on a malformed header."""
    head = admit(headers, reader.fresh_gate if fresh else reader.gate)
    if head is None:
        return Verdict.FENCED, None, None
    t, tid = head[0], head[1]
    if t is STABLE:
        return stable(reader, tid, first_any), head, None
    if t is TENTATIVE:
        tm = tmax_of(headers)
        return tentative(reader, tid, tm, fresh), head, tm
    return Verdict.CONTROL, head, None


def stable(reader: Reader, tid: int, first_any: bool) -> Verdict:
    """Whether a stable tuple is news to ``reader`` (NEW), a duplicate, or past a gap."""
    last = reader.last_stable
    if tid <= last:
        return Verdict.DUPLICATE
    if tid != last + 1 and not first_any:
        return Verdict.GAP
    return Verdict.NEW


def tentative(reader: Reader, tid: int, tmax: int | None, fresh: bool) -> Verdict:
    """Whether a tentative tuple (t_max ``tmax``, None if it has none) is news to ``reader`` (NEW), or why not."""
    if reader.fresh is not None and not fresh:
        return Verdict.RECONCILING
    if not fresh and tid <= reader.last_stable:
        return Verdict.STABLE_ALREADY
    skip = reader.skip_upto
    if tmax is not None and skip is not None and tmax <= skip:
        return Verdict.HELD
    return Verdict.NEW
