"""Upstream backup's acknowledgements and queue trimming (ICDE 2005, section 5.2), Kafka-free.

An upstream node keeps each output tuple in its log until no downstream node could need it
to rebuild its state. Two acknowledgements say how far that is:

- *level-0* ``ACK(0, O, v)``: a downstream node has received ``O`` up to offset ``v``;
- *level-1* ``ACK(1, I, u)``: the oldest tuple of input ``I`` a node still needs to rebuild
  its state: ``u = cause((O, v), I)``, with ``v`` the output every downstream neighbour has
  received, taken over all outputs.

``cause`` comes from low watermarks (the paper's indicators): every output tuple records,
per node input, the oldest input tuple still in the operators' state when it was emitted (the
last one processed, for stateless operators). They never decrease along a stream. The
upstream node trims at the oldest level-1 ack over all its downstream nodes, and keeps the
tuple named: trimming at level-0 instead would lose the tuples behind a window's state.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping

Watermarks = Mapping[str, int]  # node input (topic:partition) -> offset of the oldest tuple still needed


class CauseMap:
    """One output's offsets and the low watermarks of the tuple written at each: ``cause``."""

    def __init__(self) -> None:
        self._offsets: list[int] = []
        self._marks: list[Watermarks] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def record(self, offset: int, marks: Watermarks) -> None:
        """The tuple at ``offset`` was written (offsets come in increasing order, maybe with gaps)."""
        if self._offsets and offset <= self._offsets[-1]:
            raise ValueError(f"output offset {offset} is not after {self._offsets[-1]}")
        self._offsets.append(offset)
        self._marks.append(dict(marks))

    def cause(self, v: int) -> Watermarks | None:
        """The watermarks of the last tuple at or before ``v``: what regenerating the output after
        ``v`` needs from each input (carried forward over offsets that hold no tuple); None if none."""
        i = bisect_right(self._offsets, v)
        return self._marks[i - 1] if i else None

    def prune(self, v: int) -> None:
        """Forget entries no ``cause(w)`` with ``w >= v`` needs (level-0 passed ``v``)."""
        i = bisect_right(self._offsets, v) - 1
        if i > 0:
            del self._offsets[:i], self._marks[:i]


def received(level0: Mapping[str, int | None]) -> int | None:
    """How far every downstream node has received an output: the minimum level-0 ack; None while
    one of them has acknowledged nothing (then nothing after the start is known to be safe)."""
    if not level0 or any(v is None for v in level0.values()):
        return None
    return min(v for v in level0.values() if v is not None)


def level1(outputs: Mapping[str, tuple[CauseMap, int | None]], inputs: Iterable[str]) -> dict[str, int] | None:
    """The level-1 acks a node sends upstream: per input, the earliest ``cause((O, v_O), I)`` over its
    outputs, where ``v_O`` is what every reader of ``O`` has received. None (no ack) until every
    output has a ``v_O`` with a cause: an ack must never name a tuple the node may still need."""
    out: dict[str, int] = {}
    names = list(inputs)
    for causes, v in outputs.values():
        marks = causes.cause(v) if v is not None else None
        if marks is None or any(i not in marks for i in names):
            return None
        for i in names:
            out[i] = min(out.get(i, marks[i]), marks[i])
    return out


def trim_point(acks: Mapping[str, int | None]) -> int | None:
    """Where an upstream log may start: the oldest level-1 ack over all its registered downstream
    nodes (a node that has not acked keeps everything); records before it may be deleted."""
    return received(acks)
