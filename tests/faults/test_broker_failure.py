"""The chain on a 3-broker cluster (replication 3, min ISR 2) with a broker killed with kill -9
while a source is down: new results still within X, tentative then corrected, and every replica
ends with the failure-free output of the same cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.kafka.cluster import KafkaCluster
from tests.dpc_chain import Run, Schedule, check_schedule, run_chain

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def failure_free3(kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_chain(kafka3, tmp_path_factory.mktemp("ff3"), [], None)


@pytest.mark.timeout(900)
def test_broker_killed_during_a_source_failure(kafka3: KafkaCluster, tmp_path: Path, failure_free3: Run) -> None:
    """s2 down 2..6 s; at 3 s the broker leading most of the chain's partitions is killed (kill -9) and
    started again at 9 s."""
    schedule = Schedule().stop_source(2, 2.0, 4.0).kill_broker(kafka3, 3.0, 6.0)
    try:
        run = run_chain(kafka3, tmp_path, schedule, failure_free3)
    finally:
        schedule.wait_brokers()
    assert all(kafka3.alive()), "the killed broker came back"
    check_schedule(run, failure_free3, schedule)
