"""DPC across an exchange edge (``services.spec.exchanges``): the chain with n1 and n2 in 2 partitions
and its window n3 in 3, so n2's output reaches n3 over 6 connections, each read as its own input.

Each schedule ends with the failure-free stable output on every replica of every connection and of
every window partition, ids included, nothing stable undone; with a source failure, tentative
results within X, then corrected. Quick: a source failure while a replica of a producer partition is
killed and a consumer replica paused. Slow: both replicas of one producer partition killed while
the source is down, and seeded random schedules drawn over every partition.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.dpc_chain import EXCHANGE, Run, Schedule, Shape, check_schedule, random_schedule, run_chain

pytestmark = pytest.mark.integration


def test_a_source_failure_and_replica_faults_on_both_sides_of_an_exchange(
    kafka: Any, tmp_path: Path, reference: Callable[[Shape], Run]
) -> None:
    """s2 down 2..5 s: every connection's consumers go tentative and reconcile after; meanwhile a
    replica of producer partition 1 (n2.r0.p1) is killed for 3 s, and a replica of consumer partition
    2 (n3.r1.p2) paused for 2 s, so n3's replicas switch connections' upstream replicas by id."""
    failure_free = reference(EXCHANGE)
    schedule = Schedule(partitions=2).stop_source(2, 2.0, 3.0).kill("n2.r0.p1", 3.0, 3.0).pause("n3.r1.p2", 2.5, 2.0)
    check_schedule(run_chain(kafka, tmp_path, schedule, failure_free), failure_free, schedule)


@pytest.mark.slow
def test_both_replicas_of_a_producer_partition_killed_in_a_source_failure(
    kafka: Any, tmp_path: Path, reference: Callable[[Shape], Run]
) -> None:
    """s3 down 1..5 s; both replicas of n2's partition 0 die at 2 s and come back at 4.5 s: its three
    connections carry nothing from either replica meanwhile, and every consumer partition of n3 ends right."""
    failure_free = reference(EXCHANGE)
    schedule = Schedule(partitions=2).stop_source(3, 1.0, 4.0).kill_both("n2", 2.0, 2.5, stagger=0.2, partition=0)
    check_schedule(run_chain(kafka, tmp_path, schedule, failure_free), failure_free, schedule)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_random_fault_schedule_across_an_exchange(
    kafka: Any, tmp_path: Path, reference: Callable[[Shape], Run], seed: int
) -> None:
    failure_free = reference(EXCHANGE)
    schedule = random_schedule(seed, EXCHANGE)
    run = run_chain(kafka, tmp_path, schedule, failure_free, "undo" if seed % 3 == 2 else "checkpoint")
    check_schedule(run, failure_free, schedule)


def test_a_process_hosting_three_partitions_killed_in_a_source_failure(
    kafka: Any, tmp_path: Path, reference: Callable[[Shape], Run]
) -> None:
    """n3 runs its 3 partitions in one process per replica (``processes: 1``): kill -9 of n3.r0.proc0
    at 3 s takes three partition tasks down at once while s2 is down (2..5 s). Each is failed, fenced
    and restarted per partition (from its own restart image), and every partition of every replica
    ends with the failure-free output, tentative results within X and corrected meanwhile."""
    failure_free = reference(EXCHANGE)
    schedule = Schedule(partitions=2).stop_source(2, 2.0, 3.0).kill("n3.r0.proc0", 3.0, 3.0)
    run = run_chain(kafka, tmp_path, schedule, failure_free, shape=replace(EXCHANGE, window_processes=1))
    assert (run.log_dir / "n3.r0.proc0.log").exists() and not (run.log_dir / "n3.r0.p1.log").exists()
    check_schedule(run, failure_free, schedule)
