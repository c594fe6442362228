"""What SUnion serializes: one tuple (``STuple``) and the bucket of tuple time it waits in.

Its own module because both SUnion (``sunion``) and what it keeps of a failure for the redo
(``kept``) hold them, and the node's stable path and the schemes take them from SUnion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from services.core.tuples import NO_TIME, STABLE, TupleType


@dataclass(slots=True)
class STuple:
    """One serialized tuple: its type, which input it came from, its id there, time and record;
    a tentative one also its t_max (from its ``ht`` header); and its offset in the input's log
    where the scheme asks for input positions (``RecoveryScheme.wants_positions``), else -1."""

    type: TupleType
    port: int
    id: int
    stime: int
    rec: Any
    tmax: int = NO_TIME
    offset: int = -1

    def order(self) -> tuple[int, int, int]:
        return (self.stime, self.port, self.id)

    def __reduce__(self) -> tuple[Callable[..., STuple], tuple[Any, ...]]:
        """Pickled as its fields in order: a restart image can hold a merge's whole backlog, and a
        slotted dataclass's own pickling looks its fields up again for every tuple (2.6x slower)."""
        return (STuple, (self.type, self.port, self.id, self.stime, self.rec, self.tmax, self.offset))

    def labeled(self, label: TupleType) -> STuple:
        """This tuple as ``label``, every other field kept: a bucket emitted or redone under its label."""
        return STuple(label, self.port, self.id, self.stime, self.rec, self.tmax, self.offset)


@dataclass
class Bucket:
    first_arrival: float
    tuples: list[STuple] = field(default_factory=list)

    def clean(self) -> bool:
        return all(t.type is STABLE for t in self.tuples)


# One bucket on its way out: its index, its label and its tuples (copies carrying the label).
Ready = tuple[int, TupleType, list[STuple]]
