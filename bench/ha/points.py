"""The HA bench's points: the repeated runs of one configuration, told by their median and spread.

Each configuration runs several times (``--repeats``, interleaved so that a drift of the machine
touches every configuration alike); a table cell is the median with the range of the runs beside
it, and a figure's point the median with the range as its error bar.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.ha import experiments as ex


@dataclass
class Point:
    """The runs of one configuration (none: a configuration that was not run)."""

    config: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # each run's CPU overhead over its amnesia baseline

    def __bool__(self) -> bool:
        return bool(self.runs)

    def values(self, key: str, scale: float = 1.0) -> list[float]:
        if key == "cpu_pct":
            return list(self.cpu)
        return [scale * r[key] for r in self.runs if isinstance(r.get(key), (int, float))]

    def median(self, key: str, scale: float = 1.0) -> float | None:
        v = self.values(key, scale)
        return statistics.median(v) if v else None

    def spread(self, key: str, scale: float = 1.0) -> tuple[float, float] | None:
        v = self.values(key, scale)
        return (min(v), max(v)) if v else None

    def cell(self, key: str, scale: float = 1.0, digits: int = 0) -> str:
        """``median (min–max)``, or the one value of a single run; "–" if none."""
        v = self.values(key, scale)
        if not v:
            return "–"
        f = f"{{:.{digits}f}}"
        med = f.format(statistics.median(v))
        return med if len(v) == 1 else f"{med} ({f.format(min(v))}–{f.format(max(v))})"

    def guarantee(self) -> str:
        """What the runs' output logs show: precise, repeating with a range of duplicates, or neither."""
        rec = recovery(self.config)
        if all(r["precise"] for r in self.runs):
            return "precise"
        dups = [r.get("duplicates") for r in self.runs]
        clients = all(r.get("client_exact", r["precise"]) for r in self.runs)
        if rec == "rollback" and clients and all(d is not None for d in dups):
            lo, hi = min(d for d in dups if d is not None), max(d for d in dups if d is not None)
            return f"repeating, {lo if lo == hi else f'{lo}–{hi}'} duplicates"
        if rec == "gap":
            return "gap"
        return f"NOT precise in {sum(not r['precise'] for r in self.runs)} of {len(self.runs)}"


def recovery(config: dict[str, Any]) -> str:
    return "gap" if config["scheme"] == "amnesia" else config.get("recovery", "precise")


def points(runs: list[dict[str, Any]]) -> list[Point]:
    """The runs grouped by configuration, in the order each first ran; failed runs left out."""
    by: dict[str, Point] = {}
    ok = [r for r in runs if "error" not in r]
    for r in ok:
        p = by.setdefault(repr(sorted(r["config"].items())), Point(r["config"]))
        p.runs.append(r)
        cpu = ex.cpu_overhead(r, ok)
        if cpu is not None:
            p.cpu.append(cpu)
    return list(by.values())


def find(pts: list[Point], **cfg: Any) -> Point:
    """The precise (or amnesia) point with ``cfg``; an empty one if none."""
    return next(
        (p for p in pts if recovery(p.config) != "rollback" and all(p.config.get(k) == v for k, v in cfg.items())),
        Point(),
    )


def failed(runs: list[dict[str, Any]]) -> int:
    return sum(1 for r in runs if "error" in r)
