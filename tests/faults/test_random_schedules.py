"""Seeded random fault schedules on the replicated chain (``tests/dpc_chain.py``): one to three
overlapping faults per run drawn from every fault kind (kill -9, SIGSTOP, a stopped source, a
flapping source, both replicas of a node killed, the coordinator killed while replicas
reconcile), sometimes the coordinator too, a third of them with undo/redo. Each run ends with
the failure-free output on every replica, and where a source failed, DPC went tentative within
X and corrected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dpc_chain import Run, check_schedule, random_schedule, run_chain

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("seed", [100])
def test_random_fault_schedule_quick(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    schedule = random_schedule(seed)
    check_schedule(run_chain(kafka, tmp_path, schedule, failure_free), failure_free, schedule)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100))
def test_random_fault_schedule(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    schedule = random_schedule(seed)
    run = run_chain(kafka, tmp_path, schedule, failure_free, "undo" if seed % 3 == 2 else "checkpoint")
    check_schedule(run, failure_free, schedule)
