"""A node that keeps its window in CEC (``checkpoint: {method: cec}``), as a real process on the real
broker: killed with kill -9 again and again, each time restarted from its output log alone (no
restart topic), its output must equal the failure-free run tuple for tuple, with dense ids, each
tuple once in its log; a paused copy that wakes up after its successor took over must add nothing.
CEC's rival, a changelog of the window's parts (``checkpoint: {method: changelog}``), must do as well
under the same kills.

The input: readings of skewed sensors (a few keys fill their windows fast, many slowly), so the
log holds fast windows' results, slow windows' CEC_CHECKs and many open parts at every kill.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from services.client.reader import StreamReader
from services.core.kafka import plain_consumer
from services.core.tuples import FOOTPRINTS, TupleType, peek
from services.deploy import processes
from services.log.tail import read_range
from tests.integration.ha_rig import HaRig
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

SPEC = """\
name: cec-{u}
defaults: {partitions: 1}
dpc: {heartbeat_interval: 100, failure_timeout: 1000}
streams:
  in_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: window_stat, key: key}
operators:
  win: {type: window, input: in_{u}, output: out_{u}, key: sensor, WINDOW,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win], checkpoint: CHECKPOINT}
"""
METHODS = {"cec": "{method: cec, q: 200, u: 3000, cp_ms: 20}", "changelog": "{method: changelog}"}
WINDOWS = {"count": "count: 10", "time": "size: 2000, slide: 1000"}
RATE, COUNT, SENSORS = 1000, 12_000, 200


def _types(bootstrap: str, topic: str) -> dict[TupleType | None, int]:
    """How many records of each type the log holds (committed ones)."""
    c = plain_consumer(bootstrap, "test.types", unique=True)
    try:
        start, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        out: dict[TupleType | None, int] = {}
        for m in read_range(c, topic, 0, start, end):
            t = peek(m.headers())[0]
            out[t] = out.get(t, 0) + 1
        return out
    finally:
        c.close()


def _readers_skip_footprints_unless_asked(rig: HaRig, stream: str, types: dict[TupleType | None, int]) -> None:
    """A reader of the stream gets no footprint; one that asks (``hastream tail --cec``) gets every one,
    each with its part and input id, its state's size in place of the state."""
    plain = StreamReader(rig.spec, stream, rig.bootstrap)
    shown = StreamReader(rig.spec, stream, rig.bootstrap, footprints=True)
    try:
        stable = types[TupleType.STABLE]
        got = [t.meta.type for t in plain.read_until(lambda g: _stable(g) >= stable, 60)]
        assert not FOOTPRINTS.intersection(got) and got.count(TupleType.STABLE) == stable
        feet = sum(types.get(t, 0) for t in FOOTPRINTS)
        seen = [t for t in shown.read_until(lambda g: sum(t.meta.type in FOOTPRINTS for t in g) >= feet, 60)]
        opened = [t.value for t in seen if t.meta.type is TupleType.CEC_OPEN]
        assert len(opened) == types[TupleType.CEC_OPEN]
        assert all(v is not None and v["state"] > 0 and "." in v["part"] for v in opened)
    finally:
        plain.close()
        shown.close()


def _stable(tuples: list[Any]) -> int:
    return sum(t.meta.type is TupleType.STABLE for t in tuples)


def _written(rig: HaRig, stream: str, more: int) -> None:
    """Until the node's output log holds ``more`` records more than now (it runs, and writes)."""
    topic = rig.spec.topic(stream)
    c = plain_consumer(rig.bootstrap, "test.end", unique=True)
    try:
        end = lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]  # noqa: E731
        first = end()
        wait_for(lambda: end() >= first + more, 60, f"{topic} to grow by {more} records")
    finally:
        c.close()


def _spec(window: str, method: str = "cec") -> str:
    return SPEC.replace("WINDOW", WINDOWS[window]).replace("CHECKPOINT", METHODS[method])


@pytest.mark.parametrize("window, method", [("count", "cec"), ("time", "cec"), ("count", "changelog")])
def test_a_node_killed_again_and_again_gives_the_failure_free_output(
    kafka: Any, tmp_path: Path, window: str, method: str
) -> None:
    """CEC (count and time windows), and its rival the changelog, on the same node and faults."""
    rig = HaRig(kafka.bootstrap, tmp_path, _spec(window, method), COUNT, RATE, sensors=SENSORS)
    rnd = random.Random(window)
    try:
        out = f"out_{rig.u}"
        recovered = "rebuilt" if method == "cec" else "changelog records"
        rig.start("n", 0)
        rig.feed()
        for run in range(2, 5):
            # the log grows by results (and CEC's footprints) as the node runs; not by the EPOCH of a run
            # that just started, nor by the abort marker its start leaves for the one killed
            _written(rig, out, rnd.randint(300, 1500) // (5 if method == "changelog" else 1))
            processes.kill(rig.proc("n", 0))
            rig.start("n", 0)
            wait_for(lambda: recovered in rig.log("n", 0, run), 60, f"run {run} to recover")  # noqa: B023
        want, got = rig.outputs(out, 120)
        rig.assert_precise(out, want, got)
        types = _types(kafka.bootstrap, rig.spec.topic(out))
        if method == "changelog":
            assert not FOOTPRINTS.intersection(types), types
            return
        assert types.get(TupleType.CEC_OPEN, 0) > 0 and types.get(TupleType.CEC_CHECK, 0) > 0, types
        _readers_skip_footprints_unless_asked(rig, out, types)
    finally:
        rig.close()


def test_a_paused_copy_that_wakes_after_its_successor_took_over_adds_nothing(kafka: Any, tmp_path: Path) -> None:
    rig = HaRig(kafka.bootstrap, tmp_path, _spec("count"), COUNT, RATE, sensors=SENSORS)
    try:
        rig.start("n", 0)
        rig.feed()
        _written(rig, f"out_{rig.u}", 1000)
        zombie = rig.proc("n", 0)
        processes.pause(zombie)
        rig.start("n", 0)
        wait_for(lambda: "rebuilt" in rig.log("n", 0, 2), 30, "the successor to recover")
        time.sleep(1.0)
        processes.resume(zombie)
        wait_for(lambda: not processes.alive(zombie), 30, "the woken copy to stop, fenced")
        out = f"out_{rig.u}"
        want, got = rig.outputs(out, 120)
        rig.assert_precise(out, want, got)
    finally:
        rig.close()
