"""Seeded crash schedules on the replicated chain (``tests/dpc_chain.py``) with its window node n3
keeping its state in CEC (``checkpoint: {method: cec}``): each run ends with the failure-free output
of the default chain on every replica, tuple for tuple and ids included (CEC never changes what a
node computes, only where its state is kept), and where a source failed, DPC went tentative within X
and corrected.

Every schedule puts one fault on n3, drawn from every kind: kill -9 of a replica (once or twice in a
row, so a recovery is itself recovered from), SIGSTOP past the failure timeout, both replicas killed,
and a kill while n3 processes tentative input (its checkpointer paused: the restart rebuilds the stable
state from the log and goes through the failure again). Half the schedules also stop a source, so n3's
reconciliation rolls its window back and its redo is checkpointed anew, and a third kill the
coordinator as well. The kill times are random: they land in a checkpoint burst, right after a CEC_OPEN
or a result, or inside a transaction as it comes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.dpc_chain import CEC, Run, Schedule, check_schedule, run_chain

pytestmark = pytest.mark.integration

KINDS = ("kill", "kill_twice", "pause", "both", "kill_in_failure")


def cec_schedule(seed: int) -> Schedule:
    """One fault on n3 of each draw's kind, maybe a stopped source and a dead coordinator besides."""
    rng = random.Random(seed)
    sched = Schedule()
    role = f"n3.r{rng.randint(0, 1)}.p0"
    kind = KINDS[seed % len(KINDS)]  # every kind as often as the others
    at, down = round(rng.uniform(1.5, 5.0), 1), round(rng.uniform(1.0, 3.0), 1)
    source = rng.randint(1, 3)
    if kind == "kill":
        sched.kill(role, at, down)
    elif kind == "kill_twice":  # the second crash lands in or soon after the first recovery
        sched.kill(role, at, down)
        sched.kill(role, round(at + down + rng.uniform(0.3, 1.5), 1), round(rng.uniform(1.0, 2.0), 1))
    elif kind == "pause":  # past the failure timeout (0.8 s): its partner goes on alone
        sched.pause(role, at, down)
    elif kind == "both":
        sched.kill_both("n3", at, down, round(rng.uniform(0.0, 0.5), 1))
    else:  # inside a source failure long enough for n3 to go tentative (alpha x X = 0.9 s)
        sched.stop_source(source, at, round(rng.uniform(2.5, 4.0), 1))
        sched.kill(role, round(at + rng.uniform(1.2, 2.2), 1), down)
    if kind != "kill_in_failure" and rng.random() < 0.5:
        sched.stop_source(source, round(rng.uniform(1.0, 6.0), 1), round(rng.uniform(1.5, 4.0), 1))
    if rng.random() < 0.3:
        sched.kill("coordinator", round(rng.uniform(1.0, 6.0), 1), round(rng.uniform(1.0, 4.0), 1))
    return sched


def test_every_kind_of_n3_fault_is_drawn_as_often_as_the_others() -> None:
    drawn = [str(cec_schedule(seed)) for seed in range(100)]
    assert all(d.count("n3") >= 1 for d in drawn)
    assert sum("kill n3" in d for d in drawn) >= 60 and sum("pause n3" in d for d in drawn) == 20
    assert sum("source" in d for d in drawn) >= 40 and sum("coordinator" in d for d in drawn) >= 15


@pytest.mark.parametrize("seed", [4])  # a kill while n3 processes tentative input
def test_cec_fault_schedule_quick(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    schedule = cec_schedule(seed)
    check_schedule(run_chain(kafka, tmp_path, schedule, failure_free, shape=CEC), failure_free, schedule)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100))
def test_cec_fault_schedule(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    schedule = cec_schedule(seed)
    check_schedule(run_chain(kafka, tmp_path, schedule, failure_free, shape=CEC), failure_free, schedule)
