"""Seeded random fault schedules on the replicated chain (``tests/dpc_chain.py``): one to three
overlapping faults per run drawn from every fault kind (kill -9, SIGSTOP, a stopped source, a
flapping source, both replicas of a node killed, the coordinator killed while replicas
reconcile), sometimes the coordinator too, a third of them with undo/redo and a quarter with a
memory bound (``dpc.max_kept``) that a source failure outgrows. Each run ends with
the failure-free output on every replica, and where a source failed, DPC went tentative within
X and corrected."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.dpc_chain import Run, check_schedule, random_schedule, run_chain

pytestmark = pytest.mark.integration

SMALL_MAX_KEPT = 300  # n1 sees 200 readings/s of its two other sources: a failure past 1.5 s spills


@pytest.mark.parametrize("seed", [100])
def test_random_fault_schedule_quick(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    schedule = random_schedule(seed)
    check_schedule(run_chain(kafka, tmp_path, schedule, failure_free), failure_free, schedule)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100))
def test_random_fault_schedule(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    schedule = random_schedule(seed)
    shape = replace(failure_free.shape, max_kept=SMALL_MAX_KEPT) if seed % 4 == 1 else failure_free.shape
    run = run_chain(kafka, tmp_path, schedule, failure_free, "undo" if seed % 3 == 2 else "checkpoint", shape)
    check_schedule(run, failure_free, schedule)
