"""HA and DPC nodes in one query network, on a real broker, with faults on both sides (ha-review D2).

- An HA node below a replicated DPC node: one of the DPC node's inputs stops, so its output turns
  tentative and is corrected after the input heals; meanwhile the HA node's primary is killed. The
  HA node takes only the stable stream (tentative input counts as not yet arrived): its output is
  the failure-free output, each tuple once in its log (precise recovery), and the DPC node's
  failure never shows in it.
- A DPC node below an HA node: the HA node's primary is killed while input flows, and the DPC node
  follows the one log through the takeover: its stable output is the failure-free output.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from services.client.view import StreamView
from services.deploy import processes
from services.operators.reference import evaluate
from tests.integration.ha_rig import HaRig

pytestmark = pytest.mark.integration

RATE, COUNT = 200, 2400  # 12 s of input
WINDOW = """size: 500, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}"""
HA_BELOW_DPC = f"""\
name: habelow-{{u}}
defaults: {{partitions: 1}}
dpc: {{delay: 1000, bucket: 100, heartbeat_interval: 100, failure_timeout: 800}}
streams:
  in_{{u}}: {{schema: reading, key: sensor}}
  in2_{{u}}: {{schema: reading, key: sensor}}
  mid_{{u}}: {{schema: reading, key: sensor}}
  out_{{u}}: {{schema: window_stat, key: key}}
operators:
  both: {{type: union, inputs: [in_{{u}}, in2_{{u}}], output: mid_{{u}}}}
  win: {{type: window, input: mid_{{u}}, output: out_{{u}}, key: sensor, {WINDOW}}}
nodes:
  u: {{operators: [both], replicas: 2}}
  n: {{operators: [win], replicas: 2, ha: {{scheme: passive_standby, recovery: precise, interval_ms: 50}}}}
"""
DPC_BELOW_HA = f"""\
name: dpcbelow-{{u}}
defaults: {{partitions: 1}}
dpc: {{delay: 1000, bucket: 100, heartbeat_interval: 100, failure_timeout: 800}}
streams:
  in_{{u}}: {{schema: reading, key: sensor}}
  mid_{{u}}: {{schema: window_stat, key: key}}
  out_{{u}}: {{schema: window_stat, key: key}}
operators:
  win: {{type: window, input: in_{{u}}, output: mid_{{u}}, key: sensor, {WINDOW}}}
  same: {{type: filter, input: mid_{{u}}, output: out_{{u}}, where: "True"}}
nodes:
  n: {{operators: [win], replicas: 2, ha: {{scheme: active_standby, recovery: precise, interval_ms: 50}}}}
  d: {{operators: [same], replicas: 2}}
"""


def test_an_ha_node_below_a_dpc_node_waits_for_the_stable_stream_through_faults_on_both_sides(
    kafka: Any, tmp_path: Path
) -> None:
    rig = HaRig(kafka.bootstrap, tmp_path, HA_BELOW_DPC, COUNT, RATE, more=("in2",))
    for node, r in (("u", 0), ("u", 1), ("n", 0), ("n", 1)):
        rig.start(node, r)
    try:
        first = rig.primary("n", None, 60)
        rig.feed()
        time.sleep(2.5)
        assert rig.sources is not None
        rig.sources.hold(f"in2_{rig.u}", 4.0)  # the DPC node's output turns tentative after its delay
        time.sleep(2.0)
        processes.kill(rig.proc("n", first))  # during the DPC node's failure
        rig.primary("n", first)
        rig.start("n", first)
        want, got = rig.outputs(f"out_{rig.u}", 90)
        rig.assert_precise(f"out_{rig.u}", want, got)
        for r in (0, 1):
            assert "Can't subtract" not in rig.log("n", r), rig.log("n", r)[-2000:]
    finally:
        rig.close()


def test_a_dpc_node_below_an_ha_node_follows_its_one_log_through_a_takeover(kafka: Any, tmp_path: Path) -> None:
    rig = HaRig(kafka.bootstrap, tmp_path, DPC_BELOW_HA, COUNT, RATE)
    for node, r in (("n", 0), ("n", 1), ("d", 0), ("d", 1)):
        rig.start(node, r)
    try:
        first = rig.primary("n", None, 60)
        rig.rejoined("n", 1 - first, 60)
        rig.feed()
        time.sleep(3.0)
        processes.kill(rig.proc("n", first))
        second = rig.primary("n", first)
        rig.start("n", first)
        rig.rejoined("n", first, 60)
        threading.Timer(2.0, processes.kill, (rig.proc("d", 0),)).start()  # and a DPC replica, later
        time.sleep(1.0)
        processes.pause(rig.proc("n", second))  # past the detection time
        assert rig.primary("n", second) == first
        processes.resume(rig.proc("n", second))
        want, got = rig.outputs(f"out_{rig.u}", 90)
        assert got == want, "the DPC node's stable output differs from the failure-free run"
        rig.assert_precise(f"mid_{rig.u}", *_mid(rig))
    finally:
        rig.close()


def _mid(rig: HaRig) -> tuple[list[Any], list[Any]]:
    """The failure-free output of the HA node and what a client reads of its log."""
    want = evaluate(rig.spec, {rig.input: [rig.workload[rig.input]]}, ended=True)[f"mid_{rig.u}"][0]
    with StreamView(rig.spec, f"mid_{rig.u}", rig.bootstrap, stable_only=True) as view:
        view.read_until(lambda v: len(v.stable(0)) >= len(want), 30)
        return want, view.stable(0)
