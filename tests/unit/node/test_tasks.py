"""Partition tasks: which partitions a process hosts, and how the launcher and the spec say it."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.core.errors import SpecError
from services.core.metrics import Merged
from services.core.paths import REPO_ROOT
from services.deploy.local import service_commands
from services.node.tasks import tasks_of
from services.spec import parse_spec

REKEY = (REPO_ROOT / "examples" / "rekey.yaml").read_text()


@pytest.mark.parametrize(("processes", "partitions"), [(1, 4), (2, 4), (3, 4), (4, 4), (2, 5)])
def test_every_partition_runs_in_exactly_one_process_and_they_spread_evenly(processes: int, partitions: int) -> None:
    hosted = [tasks_of(q, processes, partitions) for q in range(processes)]
    assert sorted(p for ps in hosted for p in ps) == list(range(partitions))
    assert max(map(len, hosted)) - min(map(len, hosted)) <= 1


def test_the_launcher_starts_one_process_per_replica_process_of_a_node_with_processes() -> None:
    spec = parse_spec(
        REKEY.replace(
            "region: {operators: [region_stats], replicas: 2}",
            "region: {operators: [region_stats], replicas: 2, processes: 2}",
        )
    )
    roles = dict(service_commands(spec, Path("rekey.yaml")))
    region = {r: argv[argv.index("run") :] for r, argv in roles.items() if r.startswith("region.")}
    assert region == {
        f"region.r{r}.proc{q}": ["run", "rekey.yaml", "region", "--process", str(q), "--replica", str(r)]
        for r in range(2)
        for q in range(2)
    }
    assert "building.r1.p2" in roles  # one process per partition where 'processes' is not given


@pytest.mark.parametrize(
    ("processes", "says"),
    [("5", "node 'region' has 4 partitions: 'processes' may be 1 to 4, got 5"), ("0", "'processes' must be")],
)
def test_processes_beyond_the_partitions_are_one_line(processes: str, says: str) -> None:
    text = REKEY.replace(
        "region: {operators: [region_stats], replicas: 2}",
        f"region: {{operators: [region_stats], processes: {processes}}}",
    )
    with pytest.raises(SpecError) as e:
        parse_spec(text, source="s.yaml")
    assert any(says in p for p in e.value.problems), e.value.problems


def test_merged_metrics_give_each_family_once_with_every_tasks_samples() -> None:
    from prometheus_client.core import GaugeMetricFamily

    class One:
        def __init__(self, p: int) -> None:
            self.p = p

        def collect(self) -> list:
            g = GaugeMetricFamily("hastream_x", "x", labels=["partition"])
            g.add_metric([str(self.p)], float(self.p))
            return [g]

    fams = list(Merged([One(0), One(1), One(2)]).collect())
    assert [f.name for f in fams] == ["hastream_x"]
    assert [(s.labels["partition"], s.value) for s in fams[0].samples] == [("0", 0.0), ("1", 1.0), ("2", 2.0)]


def test_a_tasks_log_lines_say_its_partition() -> None:
    import io
    import logging
    import threading

    from services.core.logs import setup_logging
    from services.node.tasks import TaskTag

    buf = io.StringIO()
    handler = setup_logging("n.r0.proc0", stream=buf)
    handler.addFilter(TaskTag({"p3"}))
    t = threading.Thread(target=lambda: logging.getLogger("x").warning("hello"), name="p3")
    t.start()
    t.join()
    logging.getLogger("x").warning("from the process")
    lines = buf.getvalue().splitlines()
    assert lines[0].endswith("hello task=p3") and "task=" not in lines[1]
    logging.getLogger().removeHandler(handler)
