"""The recovery types of ICDE 2005 (section 3.1) as checks of an output against the failure-free one.

``want`` is the failure-free run's output, ``got`` the output with failures (what the primary
wrote before each failure, then what its successor wrote). Gap recovery may lose tuples but
never invents, reorders or repeats one: ``got`` is ``want`` with runs left out, at most one run
per failure. ``gap_runs`` finds those runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class NotGapRecovery(AssertionError):
    """An output that is not the failure-free one with runs left out."""


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
