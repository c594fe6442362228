"""The eventual checkpoint, read back from a CEC node's output log (CEC §II.B "Constructing an EC", §III).

Rolling back from the log's tail, the first footprint met of each part is its newest; a part whose
result comes first closed before the tail, and its older footprints are passed over. The tail's N
says how many parts were open there, so the scan stops as soon as it holds that many: the oldest
of their positions is T, where the input replay starts, and what the scan read is the extent.
A log whose start comes first was trimmed past the extent: that is an error, never a partial state.

``forward`` reads the same from a hint on (``Mark.xs``: the extent's start when its record was made) to the tail,
keeping each part's last footprint and dropping a part at its result; it must find the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from services.cec.footprints import Kind, Mark, WinId

Record = tuple[Mark, Any]  # a CEC record and its payload (a footprint's pickled state, or a result)


class ScanError(RuntimeError):
    """The log does not hold an eventual checkpoint (trimmed past the extent, or a hint after its start)."""


@dataclass
class Eventual:
    """The eventual checkpoint at the log's tail: each open part's newest footprint."""

    parts: dict[WinId, Record]
    tail_pos: int  # the input position of the tail record (t_c); -1 for an empty log
    next_seq: int  # the sequence number the next record takes
    start: int  # T: the oldest footprint's position (t_c when no part is open): the replay starts after it
    read: int  # records the scan read


EMPTY = Eventual({}, -1, 0, -1, 0)


def backward(chunks: Iterable[list[Record]], trimmed: bool = False) -> Eventual:
    """The eventual checkpoint from ``chunks`` of the log: the tail's chunk first, then the one before
    it, and so on, each chunk in log order (as a consumer reads it). ``trimmed``: the log no longer
    starts at its first record, so an empty one lost its tail (a trim keeps at least the tail)."""
    parts: dict[WinId, Record] = {}
    closed: set[WinId] = set()
    tail: Mark | None = None
    read = 0
    for chunk in chunks:
        for mark, payload in reversed(chunk):
            tail = tail or mark
            read += 1
            if mark.kind is Kind.RESULT:
                if mark.win not in parts:
                    closed.add(mark.win)
            elif mark.win not in parts and mark.win not in closed:
                parts[mark.win] = (mark, payload)
            if len(parts) == tail.n:
                return _ec(parts, tail, read)
    if tail is None:
        if trimmed:
            raise ScanError("the output log was trimmed to nothing: its tail, and the operator's state, are lost")
        return EMPTY
    if len(parts) < tail.n:
        raise ScanError(
            f"the output log starts before {tail.n} parts open at its tail were found ({len(parts)}): "
            "it was trimmed past the extent, and the operator's state cannot be rebuilt"
        )
    return _ec(parts, tail, read)


def forward(records: Iterable[Record]) -> Eventual:
    """The eventual checkpoint from the log read forward from a hint to the tail."""
    parts: dict[WinId, Record] = {}
    tail: Mark | None = None
    read = 0
    for mark, payload in records:
        tail, read = mark, read + 1
        if mark.kind is Kind.RESULT:
            parts.pop(mark.win, None)
        else:
            parts[mark.win] = (mark, payload)
    if tail is None:
        return EMPTY
    if len(parts) != tail.n:
        raise ScanError(
            f"the forward scan found {len(parts)} of {tail.n} open parts: its hint is after the extent's start"
        )
    return _ec(parts, tail, read)


def _ec(parts: dict[WinId, Record], tail: Mark, read: int) -> Eventual:
    start = min((m.pos for m, _ in parts.values()), default=tail.pos)
    return Eventual(parts, tail.pos, tail.seq + 1, start, read)
