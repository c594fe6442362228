"""The coordinator fails during an HA takeover (ha-review D5, issue 34's coordinator fault class).

With no coordinator, no replica is failed over: the nodes go on as they are (a live primary keeps
writing, its secondaries keep following), and a dead primary's partition waits. A coordinator
restarted after kill -9 holds no role table: it rebuilds it from the replicas' heartbeats and
finishes the takeover its predecessor never ordered; one stopped (SIGSTOP) across the failure
wakes up and finishes it too. Either way the window node's output is the failure-free run,
each tuple once in its log (precise).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from services.deploy import processes
from tests.integration.ha_rig import HaRig
from tests.integration.helpers import ha_role
from tests.integration.test_ha_failover import WINDOW

pytestmark = pytest.mark.integration

SPEC = WINDOW.replace("pstandby-", "hacoord-").replace("scheme: passive_standby", "scheme: SCHEME")
RATE, COUNT = 200, 1600  # 8 s of input
DOWN_S = 3.0  # how long the coordinator is gone: many detection times


def _coordinator_fails_with_the_primary(kafka: Any, tmp_path: Path, scheme: str, how: str) -> None:
    rig = HaRig(kafka.bootstrap, tmp_path, SPEC.replace("SCHEME", scheme), COUNT, RATE)
    for r in (0, 1):
        rig.start("n", r)
    try:
        first = rig.primary("n", None, 60)
        rig.feed()
        time.sleep(2.0)
        coordinator = rig.coordinator.proc
        assert coordinator is not None
        if how == "kill":
            rig.coordinator.kill9()
        else:
            processes.pause(coordinator)
        processes.kill(rig.proc("n", first))
        time.sleep(DOWN_S)
        assert ha_role(rig.mon, "n", 1 - first) == "secondary", "a takeover with no coordinator to order it"
        if how == "kill":
            rig.coordinator.start()  # a new process: it never saw the failure, nor ordered anything
        else:
            processes.resume(coordinator)
        assert rig.primary("n", first, 30) == 1 - first
        rig.start("n", first)
        rig.rejoined("n", first, 30)
        want, got = rig.outputs(f"out_{rig.u}", 60)
        rig.assert_precise(f"out_{rig.u}", want, got)
    finally:
        rig.close()


def test_a_restarted_coordinator_finishes_a_takeover_it_did_not_order(kafka: Any, tmp_path: Path) -> None:
    _coordinator_fails_with_the_primary(kafka, tmp_path, "upstream_backup", "kill")


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["passive_standby", "active_standby"])
def test_a_coordinator_stopped_across_a_failure_finishes_the_takeover(kafka: Any, tmp_path: Path, scheme: str) -> None:
    _coordinator_fails_with_the_primary(kafka, tmp_path, scheme, "stop")
