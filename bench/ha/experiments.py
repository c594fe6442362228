"""The HA paper's evaluation (ICDE 2005, section 7) as runs of ``bench.ha.run``, with the paper's numbers.

Each experiment lists its runs (``configs``); the orchestrator runs them, and the tables set
each measured figure beside the paper's. An amnesia run of the same workload is the baseline
for CPU overhead: its secondary does nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.ha.run import Config

SCHEMES = ("passive_standby", "active_standby", "upstream_backup")
ROLLBACK = ("active_standby", "upstream_backup")  # Fig. 6's rollback series
SHORT = {"passive_standby": "PS", "active_standby": "AS", "upstream_backup": "UB", "amnesia": "amnesia"}
BASE = Config("amnesia")  # Table 5: 1000 tuples/s, M = 50 ms, D = 250 ms; aggregate, 100-tuple window, advance 10

# The paper's Table 6: (UB bw %, UB rec ms, AS bw %, AS rec ms, PS bw %, PS rec ms) by workload.
PAPER_T6 = {
    "filter": (0.64, 47.62, 100.96, 1.80, 101.27, 45.88),
    "aggregate": (0.64, 69.86, 100.96, 0.07, 111.55, 48.88),
    "union": (1.28, 50.92, 101.91, 1.82, 101.90, 47.24),
}
# Table 7, by window (tuples): (PS overhead %, PS rec ms, UB rec ms).
PAPER_T7 = {
    100: (111.55, 48.9, 69.9),
    200: (111.55, 51.7, 98.9),
    300: (111.54, 54.6, 138.7),
    400: (111.54, 60.0, 188.5),
    500: (111.54, 63.9, 248.3),
}
# Table 8, by advance (tuples): (PS overhead %, PS rec ms, UB rec ms).
PAPER_T8 = {
    100: (102.6, 47.5, 62.6),
    50: (103.6, 47.5, 61.4),
    25: (105.6, 47.6, 61.3),
    10: (111.6, 48.8, 69.9),
    5: (121.5, 51.6, 83.8),
}


def interval(quick: bool) -> list[Config]:
    """Fig. 6: recovery time against overhead as the interval M sweeps: PS, AS and UB precise, AS and UB
    rollback (the paper's series; PS's precise recovery costs it nothing more)."""
    ms = (50, 200) if quick else (25, 50, 100, 150, 200)
    series = [(s, "precise") for s in SCHEMES] + [(s, "rollback") for s in ROLLBACK]
    return [replace(BASE)] + [replace(BASE, scheme=s, recovery=r, interval_ms=m) for s, r in series for m in ms]


def classes(quick: bool) -> list[Config]:
    """Table 6: a repeatable filter, the convergent-capable aggregate, a union of two half-rate inputs."""
    works = ("filter", "aggregate", "union")
    return [replace(BASE, workload=w, scheme=s) for w in works for s in ("amnesia", *SCHEMES)]


def window(quick: bool) -> list[Config]:
    """Table 7: the aggregate's window (state size) grows, advance 10."""
    sizes = (100, 500) if quick else (100, 200, 300, 400, 500)
    return [replace(BASE, window=w, scheme=s) for w in sizes for s in ("passive_standby", "upstream_backup")]


def advance(quick: bool) -> list[Config]:
    """Table 8: the advance shrinks (more results, faster state change), window 100."""
    steps = (100, 10) if quick else (100, 50, 25, 10, 5)
    return [replace(BASE, advance=a, scheme=s) for a in steps for s in ("passive_standby", "upstream_backup")]


def chain(quick: bool) -> list[Config]:
    """Fig. 7: a chain of 1-5 aggregates in the node."""
    ks = (1, 3) if quick else (1, 2, 3, 4, 5)
    return [replace(BASE, workload="chain", aggregates=k, scheme=s) for k in ks for s in SCHEMES]


def keys(quick: bool) -> list[Config]:
    """Beyond the paper: passive standby's checkpoints as the state grows in keys, not in windows. A 10 s
    window advancing by 1 s holds up to ten accumulators per key; an interval's 50 tuples touch at
    most 50 keys, so a delta stays small while the image grows with the keys."""
    counts = (1, 10_000) if quick else (1, 100, 1000, 10_000)
    big = replace(BASE, window=10_000, advance=1000)
    return [replace(big, sensors=k, scheme=s) for k in counts for s in ("amnesia", "passive_standby")]


EXPERIMENTS = {
    "interval": interval,
    "classes": classes,
    "window": window,
    "advance": advance,
    "chain": chain,
    "keys": keys,
}


def cpu_overhead(run: dict[str, Any], runs: list[dict[str, Any]]) -> float | None:
    """Both replicas' CPU over the amnesia run's of the same workload (same span, and the same repeat
    if it has one), as a % of its primary's."""
    c = run["config"]
    bases = [
        r
        for r in runs
        if r["config"]["scheme"] == "amnesia"
        and all(r["config"].get(k) == c.get(k) for k in ("workload", "window", "advance", "aggregates", "sensors"))
        and "error" not in r
    ]
    base = next((r for r in bases if r.get("repeat") == run.get("repeat")), bases[0] if bases else None)
    if base is None or not base["cpu_primary_s"]:
        return None
    mine = (run["cpu_primary_s"] + run["cpu_secondary_s"]) / run["span_s"]
    theirs = (base["cpu_primary_s"] + base["cpu_secondary_s"]) / base["span_s"]
    return round(100 * (mine - theirs) / (base["cpu_primary_s"] / base["span_s"]), 1)
