"""The replicated DPC chain with a replicated egress on its sink, under the chain's seeded fault
schedules and one egress fault each (kill -9 or SIGSTOP of its primary, its secondary, both
replicas), and a broker killed on three brokers: every replica ends with the failure-free output,
and a plain read_committed consumer, in Python and in Java, reads the failure-free stable output of
the sink from the egress topic, in order, once (``tests/egress_chain.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dpc_chain import SLACK, Run, Schedule, check_schedule, run_chain
from tests.egress_chain import (
    EGRESS,
    LATEST,
    EgressFault,
    LatestWatcher,
    check_egress,
    egress_schedule,
    failure_free_table,
    latest_delay,
)
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


def _run(kafka: Any, tmp_path: Path, failure_free: Run, schedule: Schedule) -> None:
    settle = lambda run: check_egress(run, failure_free, kafka.bootstrap)  # noqa: E731 - services still up
    run = run_chain(kafka, tmp_path, schedule, failure_free, shape=EGRESS, settle=settle)
    check_schedule(run, failure_free, schedule)


def test_the_egress_primary_killed_then_stopped_with_a_source_down(
    kafka: Any, tmp_path: Path, failure_free: Run
) -> None:
    schedule = Schedule().stop_source(2, 2.0, 3.0).kill("n3.r0.p0", 4.0, 2.0)
    kill, pause = EgressFault("kill", 1.5), EgressFault("pause", 2.0)
    schedule += [(2.5, kill), (4.0, kill.undo), (6.5, pause), (8.5, pause.undo)]
    schedule.kinds += ["egress primary killed at 2.5 for 1.5", "egress primary stopped at 6.5 for 2.0"]
    _run(kafka, tmp_path, failure_free, schedule)


def test_a_materialized_latest_topic_holds_tentative_results_in_a_failure_and_the_stable_ones_after(
    kafka: Any, tmp_path: Path, failure_free: Run
) -> None:
    """``mode: latest`` through a source failure and the kill of its primary: every result shows on the
    topic within X (tentative while the source is down), and once the failure heals the table a consumer
    materializes from it is exactly the failure-free results."""
    watcher, kill = LatestWatcher(kafka.bootstrap), EgressFault("kill", 1.5, mode="latest")
    schedule = Schedule().stop_source(2, 2.0, 4.0)
    schedule += [(0.0, watcher), (6.5, kill), (8.0, kill.undo)]

    def settle(run: Run) -> None:
        want = failure_free_table(run, failure_free)
        try:
            wait_for(lambda: watcher.table == want, 60, "the materialized latest topic to be the failure-free results")
        except AssertionError as e:
            got = dict(watcher.table)
            wrong = [k for k in want if k in got and got[k] != want[k]]
            raise AssertionError(
                f"{e}: {len(set(want) - set(got))} missing, {len(wrong)} wrong, "
                f"{len(set(got) - set(want))} extra (first wrong: {wrong[:1]})"
            ) from None

    try:
        run = run_chain(kafka, tmp_path, schedule, failure_free, shape=LATEST, settle=settle)
    finally:
        watcher.stop()
    check_schedule(run, failure_free, schedule)
    tentative = [r for r in watcher.records if r[2] == "tentative"]
    assert tentative, "the source failed but the latest topic never held a tentative result"
    delay = latest_delay(run, watcher)
    assert delay <= run.shape.x + SLACK, f"a result reached the latest topic {delay:.2f} s after its last input"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_egress_fault_schedule(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    _run(kafka, tmp_path, failure_free, egress_schedule(seed))
