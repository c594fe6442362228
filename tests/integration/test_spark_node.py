"""A Spark node in the middle of the replicated chain, under real faults (Borealis DPC).

The chain of ``tests/dpc_chain.py`` with n3's window on Spark and a Python node n4 after it:
s1, s2, s3 -> n1 -> n2 -> n3 (Spark) -> n4, two replicas per node, each a real process (the
Spark ones with their own JVM). The failure-free run must equal the reference evaluation and
the Python engine's failure-free run, and every fault schedule (source stopped, kill -9 of the
Spark node, kill -9 of its upstream replica) must end with the failure-free stable output on
every replica, ids included, with nothing stable undone and, for a source failure, tentative
results within X that are then corrected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.harness import ServiceProcesses
from bench.workload import PacedSources
from services.core.tuples import TupleType
from services.deploy import processes
from services.operators.reference import evaluate
from spark_jobs.plan import CHECKPOINTS_ENV
from tests.dpc_chain import (
    BASE,
    RATE,
    SECONDS,
    SPARK,
    Run,
    Schedule,
    check_schedule,
    run_chain,
    workload,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

HOME_ENV = "HASTREAM_HOME"


@pytest.fixture(scope="module")
def spark_failure_free(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_chain(kafka, tmp_path_factory.mktemp("spark-ff"), [], None, shape=SPARK)


def test_failure_free_equals_the_reference_and_the_python_engine(spark_failure_free: Run, failure_free: Run) -> None:
    run = spark_failure_free
    spec = run.spec
    want = evaluate(spec, {s: [recs] for s, recs in workload(spec.sources()).items()})
    last_ts = BASE + (RATE * SECONDS - 1) * (1000 // RATE)
    for base in ("stats", "busy"):
        expected = [rec for rec in want[run.stream(base)][0] if rec["window_end"] <= last_ts]
        for r in (0, 1):
            got = [rec for _, rec in run.final(base, r) if rec["window_end"] <= last_ts]
            assert got == expected, f"{base}.r{r}: the Spark node's stable output is the reference's, in order"
    # Ids, times and payloads as the Python engine gives them.
    assert run.final("stats", 0) == failure_free.final("stats", 0)
    tentative = {k: n for k, o in run.recorder.outputs.items() if (n := o.count(TupleType.TENTATIVE))}
    assert not tentative, f"a failure-free run went tentative (logs in {run.log_dir}): {tentative}"
    n4_in = run.output("stats", 0)
    assert n4_in.count(TupleType.BOUNDARY) > 0, "the Spark node sends BOUNDARY tuples"


def test_source_stopped(kafka: Any, tmp_path: Path, spark_failure_free: Run) -> None:
    """s2 down for 7 s: the Spark node goes tentative within X, then reconciles and corrects its output.
    The outage outlasts n1's and n3's waits, a late start of n3's wait, its flush and its job (up to
    6.1 s, as for X), so that both Spark replicas emit tentative results before the source is back."""
    schedule = Schedule().stop_source(2, 2.0, 7.0)
    run = run_chain(kafka, tmp_path, schedule, spark_failure_free)
    check_schedule(run, spark_failure_free, schedule)
    assert run.output("stats", 0).count(TupleType.UNDO) > 0


def test_spark_node_killed(kafka: Any, tmp_path: Path, spark_failure_free: Run) -> None:
    """kill -9 of one Spark replica, restarted 4 s later: it continues from its restart image and segments."""
    schedule = Schedule().kill("n3.r0.p0", 3.0, 4.0)
    check_schedule(run_chain(kafka, tmp_path, schedule, spark_failure_free), spark_failure_free, schedule)


@pytest.mark.slow  # the Python chain kills upstream replicas in the default suite; this adds a minute to CI
def test_upstream_replica_of_the_spark_node_killed(kafka: Any, tmp_path: Path, spark_failure_free: Run) -> None:
    """kill -9 of n2.r0, which n3.r0 reads: the Spark node switches to n2.r1 after its last stable id."""
    schedule = Schedule().kill("n2.r0.p0", 3.0, 4.0)
    run = run_chain(kafka, tmp_path, schedule, spark_failure_free)
    check_schedule(run, spark_failure_free, schedule)


@pytest.mark.slow  # about 2 minutes: the default suite keeps the Spark node's kill -9 and stopped source
def test_spark_replica_restarted_on_another_host_continues_from_shared_checkpoints(
    kafka: Any, tmp_path: Path, spark_failure_free: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint root on shared storage: n3.r0 is killed -9 and restarted as on another host (another
    HASTREAM_HOME, the same HASTREAM_SPARK_CHECKPOINTS). It continues from its restart image in Kafka,
    whose segments it finds in the shared folder; with the default root under the home it could not."""
    shared = tmp_path / "shared"
    monkeypatch.setenv(CHECKPOINTS_ENV, str(shared))
    role = "n3.r0.p0"
    schedule = Schedule().kill(role, 3.0, 4.0)
    other_host = tmp_path / "other-host"

    def restart_elsewhere(s: ServiceProcesses, _: PacedSources) -> None:
        s.procs[role] = processes.spawn(
            s.commands[role], s.log_dir / f"{role}.log", {**s.env, HOME_ENV: str(other_host)}
        )

    schedule[1] = (schedule[1][0], restart_elsewhere)
    run = run_chain(kafka, tmp_path, schedule, spark_failure_free)
    check_schedule(run, spark_failure_free, schedule)
    log = (run.log_dir / f"{role}.log").read_text()
    assert log.count("restarting from the restart image") == 1, "the restarted replica used its restart image"
    assert (shared / run.spec.name / "n3.r0.p0").is_dir() and (shared / run.spec.name / "n3.r1.p0").is_dir()
