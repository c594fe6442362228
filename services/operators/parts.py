"""State parts: an operator's state as independent parts, each opened and closed on its own.

CEC (continuous eventual checkpointing) checkpoints an operator part by part: a window of one
key, or the tuples one side of a join keeps for one key, is a part with an id that is opened by
a tuple and closed when its results are out (a window) or its last tuple expires (a join).
A part's state can be taken and put back alone, so a recovery assembles the operator from the
newest record of each part instead of one image of the whole.

The window's part id is ``(key, start)``: the key and the incarnation of its window; the count
window's ``(key, n)``, its n-th window. ``watch`` gives the operator two callbacks, called with the
part's id and a stime: ``opened`` once the tuple that opened the part is in it (its stime),
``closed`` as the part's result is made (the result's stime). An operator nobody watches calls
nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

PartId = tuple[Any, int]
PartEvent = Callable[[PartId, int], None]  # (part, stime)
Admit = Callable[[PartId], bool]  # whether the tuple being pushed goes into this part


class StateParts(Protocol):
    def part_ids(self) -> list[PartId]:
        """The parts open now."""

    def part(self, pid: PartId) -> object:
        """One open part's state (picklable, a copy's worth: the operator goes on changing its own)."""

    def load_part(self, pid: PartId, state: object) -> None:
        """Put a part's state back (a recovery), opening it."""

    def watch(self, opened: PartEvent | None, closed: PartEvent | None) -> None:
        """Call ``opened`` / ``closed`` as parts open and close (None: stop calling)."""


class Replayable(StateParts, Protocol):
    """Parts a recovery can replay input into one by one (the time and count windows; the join not yet):
    CEC loads each part's newest footprint, then replays the input from the oldest of them."""

    # Unless None, asked for each part a pushed tuple would go into (one it would open too): the
    # replay puts a tuple only into the parts whose saved state lacks it.
    admit: Admit | None
