"""The replicated DPC chain with a replicated egress on its sink, under the chain's seeded fault
schedules and one egress fault each (kill -9 or SIGSTOP of its primary, its secondary, both
replicas), and a broker killed on three brokers: every replica ends with the failure-free output,
and a plain read_committed consumer, in Python and in Java, reads the failure-free stable output of
the sink from the egress topic, in order, once (``tests/egress_chain.py``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from infra.kafka.cluster import KafkaCluster
from tests.dpc_chain import BROKER_BUDGET, DEFAULT, SLACK, Run, Schedule, check_schedule, run_chain
from tests.egress_chain import (
    EGRESS,
    EgressFault,
    LatestWatcher,
    check_egress,
    egress_schedule,
    failure_free_table,
    latest_delay,
)
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

BOTH = replace(DEFAULT, egress=("stable", "latest"))


def _run(kafka: Any, tmp_path: Path, failure_free: Run, schedule: Schedule) -> None:
    settle = lambda run: check_egress(run, failure_free, kafka.bootstrap)  # noqa: E731 - services still up
    run = run_chain(kafka, tmp_path, schedule, failure_free, shape=EGRESS, settle=settle)
    check_schedule(run, failure_free, schedule)


def test_a_stable_and_a_latest_egress_through_source_node_and_egress_failures(
    kafka: Any, tmp_path: Path, failure_free: Run
) -> None:
    """The chain's sink with a stable and a latest egress (two replicas each): s2 down 2..6 s, a replica of
    n3 killed at 4 s, the stable egress's primary killed at 2.5 s and stopped past its detection at 6.5 s
    (a zombie when it wakes), the latest egress's primary killed at 7 s. The stable topic reads as the
    failure-free output, once, in order (Python and Java consumers); every result shows on the latest
    topic within X (tentative while s2 is down), and once the failure heals the table a consumer
    materializes from it is exactly the failure-free results."""
    watcher = LatestWatcher(kafka.bootstrap)
    kill, pause, latest = EgressFault("kill", 1.5), EgressFault("pause", 2.0), EgressFault("kill", 1.5, mode="latest")
    schedule = Schedule().stop_source(2, 2.0, 4.0).kill("n3.r0.p0", 4.0, 2.0)
    schedule += [(0.0, watcher), (2.5, kill), (4.0, kill.undo), (6.5, pause), (8.5, pause.undo)]
    schedule += [(7.0, latest), (8.5, latest.undo)]
    schedule.kinds += ["stable egress primary killed at 2.5 for 1.5, stopped at 6.5 for 2.0", "latest killed at 7.0"]

    def settle(run: Run) -> None:
        check_egress(run, failure_free, kafka.bootstrap)
        _materialized(watcher, failure_free_table(run, failure_free))

    try:
        run = run_chain(kafka, tmp_path, schedule, failure_free, shape=BOTH, settle=settle)
    finally:
        watcher.stop()
    check_schedule(run, failure_free, schedule)
    tentative = [r for r in watcher.records if r[2] == "tentative"]
    assert tentative, "the source failed but the latest topic never held a tentative result"
    delay = latest_delay(run, watcher)
    assert delay <= run.shape.x + SLACK, f"a result reached the latest topic {delay:.2f} s after its last input"


def _materialized(watcher: LatestWatcher, want: dict[bytes, dict]) -> None:
    """Until the table materialized from the latest topic is ``want``; says what differs if it never is."""
    try:
        wait_for(lambda: watcher.table == want, 60, "the materialized latest topic to be the failure-free results")
    except AssertionError as e:
        got = dict(watcher.table)
        wrong = [k for k in want if k in got and got[k] != want[k]]
        raise AssertionError(
            f"{e}: {len(set(want) - set(got))} missing, {len(wrong)} wrong, "
            f"{len(set(got) - set(want))} extra (first wrong: {wrong[:1]})"
        ) from None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_egress_fault_schedule(kafka: Any, tmp_path: Path, failure_free: Run, seed: int) -> None:
    _run(kafka, tmp_path, failure_free, egress_schedule(seed))


@pytest.fixture(scope="module")
def failure_free3(crowded3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_chain(crowded3, tmp_path_factory.mktemp("ff3"), [], None, shape=BROKER_BUDGET)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_broker_killed_under_the_egress(crowded3: KafkaCluster, tmp_path: Path, failure_free3: Run) -> None:
    """Three brokers; s2 down 2..6 s and, at 3 s, the broker leading most of the chain's partitions killed
    (the egress's transaction coordinator may be on it), back at 9 s: the egress topic still reads as the
    failure-free output (the X of ``tests/faults/test_broker_failure.py``, which covers a broker failure)."""
    schedule = Schedule().stop_source(2, 2.0, 4.0).kill_broker(crowded3, 3.0, 6.0)
    settle = lambda run: check_egress(run, failure_free3, crowded3.bootstrap, timeout=120)  # noqa: E731
    try:
        run = run_chain(
            crowded3, tmp_path, schedule, failure_free3, shape=replace(BROKER_BUDGET, egress=("stable",)), settle=settle
        )
    finally:
        schedule.wait_brokers()
    assert all(crowded3.alive()), "the killed broker came back"
    check_schedule(run, failure_free3, schedule)
