"""Seeded random fault schedules on the replicated chain (``tests/dpc_chain.py``): one to three
overlapping faults per run, sometimes the coordinator too, a third of them with undo/redo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dpc_chain import Run, check_eventual_consistency, random_schedule, run_chain, summary

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("seed", [100])
def test_random_fault_schedule_quick(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    run = run_chain(kafka, tmp_path, random_schedule(seed), failure_free)
    print(summary(run))
    check_eventual_consistency(run, failure_free)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(24))
def test_random_fault_schedule(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    run = run_chain(kafka, tmp_path, random_schedule(seed), failure_free, "undo" if seed % 3 == 2 else "checkpoint")
    print(summary(run))
    check_eventual_consistency(run, failure_free)
