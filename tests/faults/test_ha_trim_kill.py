"""Kill -9 and SIGSTOP of an upstream backup primary right as the coordinator trims its input log
(ICDE 2005, section 5.2, queue trimming).

A window node of two replicas under upstream backup; the coordinator deletes the records of its
input log below the primary's level-1 acknowledgement every interval. Each fault waits until it
sees the log's start move, then strikes at once: the takeover must rebuild from the newest ack,
whose input the trim has just left as the log's first records, and nothing the trim removed
may be needed. Twice (kill -9, then SIGSTOP of the new primary past the detection time, with a
rejoin between). Upstream backup promises precise recovery here, so the output must equal the
failure-free output tuple for tuple.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from services.deploy import processes
from services.log.tail import first_offset
from tests.integration.ha_rig import HaRig
from tests.integration.test_ha_failover import UPSTREAM as SPEC  # a window node of two replicas

pytestmark = pytest.mark.integration

RATE, COUNT = 200, 2400  # 12 s of input


def test_a_primary_failing_right_as_its_input_is_trimmed_is_recovered_precisely(kafka: Any, tmp_path: Path) -> None:
    rig = HaRig(kafka.bootstrap, tmp_path, SPEC, COUNT, RATE)
    topic = f"{rig.spec.name}.{rig.input}"
    for r in (0, 1):
        rig.start("n", r)
    try:
        first = rig.primary("n", None, 60)
        rig.feed()
        time.sleep(2.5)

        _trimmed(kafka.bootstrap, topic)
        processes.kill(rig.proc("n", first))  # right after a trim
        second = rig.primary("n", first)
        rig.start("n", first)
        rig.rejoined("n", first, 30)
        time.sleep(1.0)

        _trimmed(kafka.bootstrap, topic)
        processes.pause(rig.proc("n", second))  # right after a trim, past the detection time
        assert rig.primary("n", second) == first
        processes.resume(rig.proc("n", second))
        assert processes.wait_gone(rig.proc("n", second), 20), "the replaced primary went on running after it woke up"
        want, got = rig.outputs(f"out_{rig.u}", 60)
        for text in (rig.log("n", second), rig.log("n", first, 2)):
            assert "rebuilding from the ack of cut" in text, text[-2000:]  # from an ack, not from the start
        rig.assert_precise(f"out_{rig.u}", want, got)
    finally:
        rig.close()


def _trimmed(bootstrap: str, topic: str) -> None:
    """Returns as soon as the log's start moves: a trim has just been made."""
    start = first_offset(bootstrap, topic, 0)
    deadline = time.monotonic() + 20
    while first_offset(bootstrap, topic, 0) == start:
        assert time.monotonic() < deadline, f"{topic} was not trimmed within 20 s"
