"""The paper's metrics, computed from what a run recorded (pure functions, unit-tested).

A run records, per input tuple, when it was generated (``generated``), and per output tuple,
when the client first received any version of it, stable or tentative (``first_seen``). In
the pass-through chain every output tuple comes from exactly one input tuple and carries its
source (``sensor`` = ``in<i>``) and ``seq``, so both are keyed by ``(sensor, seq)``.

* **Delay_new**: the maximum, over new input tuples, of ``first_seen - generated``. A tuple
  of the failed input generated while that input was cut off is not new: it cannot arrive
  before the failure heals whatever the system does, so it is left out, as in the paper
  (Delay_new is about the inputs that remain available). So is the first second of the run
  (warm-up: the clients' first fetches). Everything else counts, including tuples processed
  during the failure, during reconciliation and after it.
* **N_tentative**: tentative tuples the client received (computed where recorded).
* **Eventual consistency**: the final stable output equals the expected sequence, element
  by element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Key = tuple[str, int]


@dataclass(frozen=True)
class Outage:
    """Input ``sensor`` was cut off from ``start`` to ``end`` (monotonic seconds)."""

    sensor: str
    start: float
    end: float

    def hides(self, key: Key, generated: float) -> bool:
        return key[0] == self.sensor and self.start <= generated < self.end


def delays(
    first_seen: dict[Key, float], generated: dict[Key, float], outage: Outage | None = None, since: float | None = None
) -> dict[Key, float]:
    """Per new input tuple that reached the client: seconds from generation to the first version received.

    Tuples generated before ``since`` (the warm-up: consumers' first fetches) are left out.
    """
    out = {}
    for key, gen in generated.items():
        if (outage is not None and outage.hides(key, gen)) or (since is not None and gen < since):
            continue
        seen = first_seen.get(key)
        if seen is not None:
            out[key] = seen - gen
    return out


def missing(first_seen: dict[Key, float], generated: dict[Key, float]) -> int:
    """Input tuples of which the client never received any version (must be 0)."""
    return sum(1 for k in generated if k not in first_seen)


def percentile(sorted_vals: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (nan if empty)."""
    if not sorted_vals:
        return math.nan
    i = min(len(sorted_vals) - 1, max(0, math.ceil(q / 100 * len(sorted_vals)) - 1))
    return sorted_vals[i]


def summary(d: dict[Key, float]) -> dict[str, Any]:
    """Delay_new (the max) and, for context, the median and p99 of the new tuples' delays."""
    vals = sorted(d.values())
    return {
        "delay_new_s": vals[-1] if vals else math.nan,
        "p50_s": percentile(vals, 50),
        "p99_s": percentile(vals, 99),
        "tuples": len(vals),
    }


def timeline(d: dict[Key, float], generated: dict[Key, float], t0: float, bin_s: float = 0.5) -> list[list[float]]:
    """``[[t, max delay]]`` per ``bin_s`` of generation time since ``t0``: how delay evolved over the run."""
    bins: dict[int, float] = {}
    for key, v in d.items():
        b = int((generated[key] - t0) // bin_s)
        bins[b] = max(bins.get(b, v), v)
    return [[round(b * bin_s, 3), round(v, 3)] for b, v in sorted(bins.items())]


def chain_output(ticks: int, inputs: int, node: int) -> list[dict[str, Any]]:
    """What node ``node`` (1-based) of the chain outputs, stably, for ``ticks`` records per input.

    Input ``i`` record ``j`` is ``{sensor: in<i>, ts: j, value: j % 50, seq: j}`` (``ts`` here is
    the tick; ``chain.py`` maps it to event time). SUnion orders by (tuple time, input port,
    id), every record passes the first node's filter, and each later node adds 1 to ``value``.
    """
    return [
        {"sensor": f"in{i}", "ts": j, "value": float(j % 50 + node - 1), "seq": j}
        for j in range(ticks)
        for i in range(1, inputs + 1)
    ]


def compare(got: list[Any], want: list[Any]) -> dict[str, Any]:
    """Equal sequences? With the lengths and the first differing position, so a failure is readable."""
    first = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), None)
    if first is None and len(got) != len(want):
        first = min(len(got), len(want))
    return {"ok": first is None, "got": len(got), "want": len(want), "first_mismatch": first}
