"""The HA schemes across an exchange edge: a map under passive standby in 2 partitions feeds a window
under active standby in 3 (and, slow, active standby into upstream backup), so the map's output
reaches the window over 6 connections. Primaries of a producer partition and of a consumer
partition are killed (kill -9) while input flows; precise recovery on both sides: a client reads
every window partition's failure-free output, and its log holds each result once. The coordinator
trims each connection's log by what its consumer partition needs of it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from services.deploy import processes
from services.ha.guarantee import repeated_runs
from services.log.tail import first_offset, stable_log
from services.spec.exchanges import connection_topic
from tests.integration.ha_rig import HaRig
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

CHAIN = """\
name: hax-{u}
streams:
  in_{u}: {schema: reading, key: sensor, partitions: 2}
  scaled_{u}: {schema: reading, key: sensor, partitions: 2}
  out_{u}: {schema: window_stat, key: key, partitions: 3}
operators:
  twice: {type: map, input: in_{u}, output: scaled_{u}, fields: {sensor: sensor, ts: ts, value: "value * 2", seq: seq}}
  win: {type: window, input: scaled_{u}, output: out_{u}, key: sensor, size: 500, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  mapper: {operators: [twice], replicas: 2, ha: {scheme: MAPPER, recovery: precise, interval_ms: 50}}
  window: {operators: [win], replicas: 2, ha: {scheme: WINDOW, recovery: precise, interval_ms: 50}}
"""
RATE, COUNT = 200, 2400


@pytest.mark.parametrize(
    ("mapper", "window"),
    [("passive_standby", "active_standby"), pytest.param("active_standby", "upstream_backup", marks=pytest.mark.slow)],
)
def test_takeovers_on_both_sides_of_an_exchange_are_precise(kafka, tmp_path: Path, mapper: str, window: str) -> None:
    rig = HaRig(
        kafka.bootstrap, tmp_path, CHAIN.replace("MAPPER", mapper).replace("WINDOW", window), COUNT, RATE, sensors=12
    )
    u = rig.u
    try:
        for node, parts in (("mapper", 2), ("window", 3)):
            for p in range(parts):
                for r in (0, 1):
                    rig.start(node, r, p)
        primaries = {
            (n, p): rig.primary(n, None, 90, part=p) for n, ps in (("mapper", 2), ("window", 3)) for p in range(ps)
        }
        rig.feed()
        time.sleep(3.0)
        processes.kill(rig.proc("mapper", primaries[("mapper", 1)], 1))  # a producer partition's primary
        time.sleep(2.0)
        processes.kill(rig.proc("window", primaries[("window", 2)], 2))  # a consumer partition's primary
        assert rig.primary("mapper", primaries[("mapper", 1)], part=1) != primaries[("mapper", 1)]
        assert rig.primary("window", primaries[("window", 2)], part=2) != primaries[("window", 2)]
        # Each connection log is trimmed by what its consumer partition needs of it (per connection).
        conns = [(connection_topic(rig.spec, f"scaled_{u}", j, 0), i) for j in range(2) for i in range(3)]
        wait_for(
            lambda: all(first_offset(kafka.bootstrap, t, i) > 0 for t, i in conns), 30, "a trim of every connection"
        )
        for p in range(3):
            want, got = rig.outputs(f"out_{u}", 90, part=p)
            assert want and got == want, f"out partition {p} differs from the failure-free output"
            stored = [
                (tid, (stime, kv)) for tid, stime, kv in stable_log(kafka.bootstrap, rig.spec.topic(f"out_{u}"), p)
            ]
            assert repeated_runs(stored) == [] and len(stored) == len(want), f"out[{p}]: the log holds a result twice"
    finally:
        rig.close()
