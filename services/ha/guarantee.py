"""The recovery types of ICDE 2005 (section 3.1) as checks of an output against the failure-free one.

``want`` is the failure-free run's output, ``got`` the output with failures (what the primary
wrote before each failure, then what its successor wrote). Gap recovery may lose tuples but
never invents, reorders or repeats one: ``got`` is ``want`` with runs left out, at most one run
per failure. ``gap_runs`` finds those runs.

Rollback recovery loses nothing; *repeating* rollback gives duplicates identical to earlier
tuples, so the log reads R[0..j] ++ R[i..] with i <= j + 1 at each failure, and without its
duplicates it is the failure-free output. ``repeated_runs`` checks that on a log of (id,
tuple) pairs, ids being positions in R, and finds the runs written twice. Precise recovery is
repeating recovery with no run repeated and the tuples equal to R's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class NotGapRecovery(AssertionError):
    """An output that is not the failure-free one with runs left out."""


class NotRepeatingRecovery(AssertionError):
    """A log that skips an id, or repeats one with another tuple or out of its order."""


def gap_runs(want: Sequence[Any], got: Sequence[Any]) -> list[range]:
    """The runs of ``want`` (index ranges) missing from ``got``; raises ``NotGapRecovery`` where
    ``got`` holds a tuple ``want`` has not at that point (a repeat, a reordering, a wrong value)."""
    runs: list[range] = []
    i = 0
    for k, t in enumerate(got):
        j = i
        while j < len(want) and want[j] != t:
            j += 1
        if j == len(want):
            raise NotGapRecovery(
                f"output tuple {k} ({t!r}) is not in the failure-free output after its tuple {i}: "
                "a repeated, reordered or wrong tuple"
            )
        if j > i:
            runs.append(range(i, j))
        i = j + 1
    if i < len(want):
        runs.append(range(i, len(want)))
    return runs


def repeated_runs(log: Sequence[tuple[int, Any]], start: int = 0) -> list[range]:
    """The runs of ids ``log`` (``(id, tuple)`` in log order, ids ``start``, ``start`` + 1, ...) holds
    again, one per rollback; raises ``NotRepeatingRecovery`` on an id skipped (a tuple lost), a
    repeated id whose tuple differs from its first copy, or a repeat that does not go on in id order.
    A log trimmed up to id ``start`` may repeat ids below it, which cannot be compared any more."""
    first: dict[int, Any] = {}
    runs: list[range] = []
    nxt = start  # the id due next: one past the newest, or the next of a run written again
    for k, (tid, t) in enumerate(log):
        top = start + len(first)  # ids up to top-1 were written
        if tid > nxt:  # a rollback goes back, never forward
            raise NotRepeatingRecovery(
                f"log entry {k}: id {tid} where {nxt} was due (ids up to {top - 1} written): "
                + ("a tuple was lost" if nxt == top else "a run written again skips a tuple")
            )
        if tid < top:
            if tid >= start and first[tid] != t:
                raise NotRepeatingRecovery(
                    f"log entry {k}: id {tid} repeated as {t!r}, first written as {first[tid]!r}"
                )
            if tid != nxt or not runs or runs[-1].stop != tid:
                runs.append(range(tid, tid + 1))  # a rollback to ``tid``
            else:
                runs[-1] = range(runs[-1].start, tid + 1)
        else:
            first[tid] = t
        nxt = tid + 1
    return runs


def first_copies(log: Sequence[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """``log`` without what it repeats: each id's first entry, in log order: dedup(O_f + O')."""
    seen: set[int] = set()
    out = []
    for e in log:
        if e[0] not in seen:
            seen.add(e[0])
            out.append(e)
    return out
