"""What CEC writes about each state part, and the list of open parts by their last footprint.

A **footprint** is what the output log says about one open part (a window incarnation): a
CEC_OPEN record when it opens, holding its state after the opening tuple (G^open, mandatory),
CEC_CHECK records with its state later (G^check), and its result (R) when it closes (CEC §II.B).
Every record of a CEC node's output carries a ``Mark``: which kind it is, which part, how many
parts are open after it (N, the count a recovery's scan looks for), the input position of the
tuple that made it (t_now) and the record's own sequence number.

A part's id in the log (``WinId``) is the input position of the tuple that opened it and the
part's place among the parts that tuple opened (a time window's tuple opens one per slide): the
same in every run over the same input, whatever the operator numbers its parts by.

``Footprints`` is the paper's list of open parts ordered by their last footprint (τ2), oldest
first (§III.A): its head ends the extent. From it come the two quantities the policy bounds
(Fig. 3): ``q``, the records written since the head's footprint (the extent), and ``u``, the
input tuples since then (what a crash now would replay).
"""

from __future__ import annotations

from collections import OrderedDict
from enum import Enum
from typing import NamedTuple

WinId = tuple[int, int]  # (input position of the opening tuple, its place among the parts that tuple opened)


class Kind(Enum):
    OPEN = "CEC_OPEN"  # G^open: a part opened; its state after the opening tuple
    CHECK = "CEC_CHECK"  # G^check: an open part's state now
    RESULT = "STABLE"  # R: the part's result, which closes it (a data record, as every node writes)


class Mark(NamedTuple):
    """The CEC fields of one output record (its ``ht.cec`` header); a tuple, made for every record."""

    kind: Kind
    win: WinId
    n: int  # parts open once the tuple that made it is processed
    pos: int  # input position of that tuple (t_now)
    stime: int  # its stime: a footprint's time in the log, which keeps time order with the results
    seq: int  # the record's number among the node partition's CEC records
    xs: int  # the extent's start after it: the oldest open part's footprint's seq (the tail's if none)


class Footprints:
    """Open parts by their last footprint, oldest first, each with (record seq, input position) of it."""

    def __init__(self) -> None:
        self.parts: OrderedDict[WinId, tuple[int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.parts)

    def __contains__(self, win: WinId) -> bool:
        return win in self.parts

    def left(self, win: WinId, seq: int, pos: int) -> None:
        """``win`` has a new footprint (opened or checked): it moves to the young end."""
        self.parts[win] = (seq, pos)
        self.parts.move_to_end(win)

    def closed(self, win: WinId) -> None:
        """``win``'s result is out (a part opened and closed by one tuple never had a footprint)."""
        self.parts.pop(win, None)

    def start(self, tail: int) -> int:
        """The seq of the oldest footprint of an open part, where the extent starts; ``tail`` with none
        open (the tail record alone says so)."""
        for seq, _ in self.parts.values():
            return seq
        return tail

    def oldest(self) -> WinId | None:
        for win in self.parts:
            return win
        return None

    def q(self, next_seq: int) -> int:
        """The extent: records from the oldest footprint on (0 with no part open)."""
        for seq, _ in self.parts.values():
            return next_seq - seq
        return 0

    def u(self, pos: int) -> int:
        """Input tuples a crash now would replay: those after the oldest footprint's position, to ``pos``."""
        for _, at in self.parts.values():
            return pos - at
        return 0

    def since(self, win: WinId) -> int:
        """The input position of ``win``'s last footprint."""
        return self.parts[win][1]
