"""Reconciliation always finishes: whatever dies when, every live replica reaches the failure-free stable output.

Each schedule kills replicas at the moments the protocol is most exposed: just after an
input healed (a replica that may hold or be waiting for the grant), and both replicas of a
node at once (nothing of the node survives but its logs and restart images).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.core.tuples import TupleType
from tests.dpc_chain import Run, check_schedule, kill, restart, run_chain, stop_source, summary

pytestmark = pytest.mark.integration


def test_a_replica_killed_just_after_its_input_healed_still_reconciles(
    kafka: Any, tmp_path: Path, failure_free: Run
) -> None:
    schedule = [(2.0, stop_source(1, 3.0)), (5.2, kill("n1.r0.p0")), (8.2, restart("n1.r0.p0"))]
    run = run_chain(kafka, tmp_path, schedule, failure_free)
    print(summary(run))
    check_schedule(run, failure_free, schedule)
    assert run.recorder.replica(run.stream("merged"), 1).count(TupleType.TENTATIVE) > 0


@pytest.mark.slow
def test_both_replicas_of_a_node_killed_and_restarted(kafka: Any, tmp_path: Path, failure_free: Run) -> None:
    schedule = [
        (3.0, kill("n2.r0.p0")),
        (3.1, kill("n2.r1.p0")),
        (6.0, restart("n2.r0.p0")),
        (6.5, restart("n2.r1.p0")),
    ]
    run = run_chain(kafka, tmp_path, schedule, failure_free)
    print(summary(run))
    check_schedule(run, failure_free, schedule)
