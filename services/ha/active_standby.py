"""Active standby (ICDE 2005, section 5.3): the secondary's output log and how the primary bounds it.

The secondary processes the same inputs as the primary but its output goes to a log no one
reads. At takeover it sends what that log holds after the last tuple downstream has, so the
log must keep every tuple downstream may not have received (output preservation), and no
more, for it would grow without end.

Since the two may interleave differently, offsets cannot be compared across the two logs.
High watermarks can: a tuple's high watermark is, per input, the most recent input tuple
that contributed to it. Every interval the primary takes the tuple all downstream nodes have
acknowledged (level-0) and sends its high watermark as a trim; the secondary discards the
tuples that are below it on every input. A tuple equal to it on some input is kept: another
output of the same input tuple may not have reached downstream yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Watermarks = Mapping[str, int]  # node input (topic:partition) -> offset of the most recent contributing tuple


def dominated(hwm: Watermarks, trim: Watermarks) -> bool:
    """The tuple with high watermark ``hwm`` came only from input tuples before those of ``trim``:
    downstream already has its equivalent, so the secondary may drop it."""
    return all(hwm.get(i, -1) < t for i, t in trim.items())


def trim_offset(log: Iterable[tuple[int, Watermarks]], trim: Watermarks) -> int | None:
    """Where the secondary's log may start after ``trim``: the offset of its first tuple that is not
    dominated (high watermarks never decrease along a log); None if every tuple is."""
    for offset, hwm in log:
        if not dominated(hwm, trim):
            return offset
    return None
