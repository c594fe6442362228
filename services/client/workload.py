"""The sensor readings workload of the demo, ``hastream produce`` and the benchmarks: deterministic,
or on the wall clock for live deployments."""

from __future__ import annotations

import random
from typing import Any, Iterator

from services.client.source import wall_ms


def readings(
    n: int | None = None,
    sensors: int = 10,
    start_ms: int = 1_700_000_000_000,
    step_ms: int = 10,
    seed: int = 7,
    wall_clock: bool = False,
) -> Iterator[dict[str, Any]]:
    """The demo/benchmark workload: sensors reporting temperatures, event time advancing by ``step_ms``.

    Values are whole numbers (as doubles) so sums are exact in any order. With
    ``wall_clock=True`` a record's ``ts`` is the wall clock when it is generated (never
    going back), for live deployments whose boundaries track real time; otherwise the
    workload is fully deterministic (``start_ms + i * step_ms``), for tests and benchmarks.
    """
    rng = random.Random(seed)
    level = {f"s{i}": float(rng.randint(10, 40)) for i in range(sensors)}
    names = list(level)
    i = 0
    last_ts = 0
    while n is None or i < n:
        s = names[i % sensors] if sensors <= 1 else rng.choice(names)
        level[s] = float(min(120, max(-20, level[s] + rng.randint(-3, 3))))
        if wall_clock:
            last_ts = ts = max(last_ts, wall_ms())
        else:
            ts = start_ms + i * step_ms
        yield {"sensor": s, "ts": ts, "value": level[s], "seq": i}
        i += 1


def located(
    n: int | None = None, sensors: int = 24, buildings: int = 8, regions: int = 6, **kw: Any
) -> Iterator[dict[str, Any]]:
    """``readings`` with where each sensor is: sensor i sits in building i mod ``buildings``, and
    building b in region b mod ``regions`` (the re-keying workload: sensor, building, region)."""
    for r in readings(n, sensors=sensors, **kw):
        b = int(r["sensor"][1:]) % buildings
        yield {**r, "building": f"b{b}", "region": f"g{b % regions}"}
