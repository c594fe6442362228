"""Exchange edges on the real broker: a network that re-keys twice equals the reference evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.exchange.runs import preload
from services.client.workload import located, readings
from services.core.partitioner import key_bytes, partition_for
from services.core.tuples import TupleType
from services.operators.reference import canonical, evaluate
from tests.integration.helpers import by_partition, create_topics, read_stream, run_nodes_until_idle, unique_spec

pytestmark = pytest.mark.integration

REKEY = (Path(__file__).parents[2] / "examples" / "rekey.yaml").read_text().replace("name: rekey", "name: rekey-{u}")


@pytest.mark.parametrize("region_processes", [None, 1, 2])
def test_a_network_that_rekeys_twice_equals_the_reference_partition_by_partition(
    kafka, tmp_path: Path, region_processes: int | None
) -> None:
    """sensor (2 partitions) -> building (3) -> region (4): each node partition's output is the
    reference's for the keys routed to it, tuple for tuple, with dense ids from 0; the same with
    region's 4 partitions as tasks of 1 or 2 processes (``processes:``)."""
    text = REKEY
    if region_processes is not None:
        text = text.replace(
            "region: {operators: [region_stats], replicas: 2}",
            f"region: {{operators: [region_stats], replicas: 2, processes: {region_processes}}}",
        )
    spec, _ = unique_spec(text, tmp_path)
    assert spec.node_processes("region") == (region_processes or 4)
    create_topics(spec, kafka.bootstrap)
    inputs = preload(spec, kafka.bootstrap, "readings", list(located(4000, step_ms=2, seed=3)))

    run_nodes_until_idle(spec, kafka.bootstrap)

    want = evaluate(spec, {"readings": inputs}, ended=True)
    for stream, parts in (("per_building", 3), ("per_region", 4)):
        n = sum(map(len, want[stream]))
        got = by_partition(read_stream(spec, stream, kafka.bootstrap, expect=n), parts)
        for p in range(parts):
            assert [t.value for t in got[p]] == want[stream][p], f"{stream} partition {p} differs from the reference"
            assert [t.meta.id for t in got[p]] == list(range(len(got[p]))), "tuple ids must be dense from 0"
            assert all(t.meta.type is TupleType.STABLE for t in got[p])
            keys = {t.value["key"] for t in got[p]}
            assert all(partition_for(key_bytes(k), parts) == p for k in keys), (
                f"{stream} p{p} holds keys of another partition"
            )
        assert all(want[stream]), f"every partition of {stream} has results"


JOIN = """\
name: xjoin-{u}
streams:
  readings: {schema: located, key: sensor, partitions: 2}
  sites: {schema: located, key: building, partitions: 3}
  warm: {schema: located, key: sensor, partitions: 2}
  pairs: {schema: joined, key: key, partitions: 3}
operators:
  drop_cold: {type: filter, input: readings, output: warm, where: "value >= 0"}
  near: {type: join, left: warm, right: sites, output: pairs, key: building, within: 20,
         fields: {key: left.building, ts: "max(left.ts, right.ts)", left_value: left.value, right_value: right.value}}
nodes:
  sense: {operators: [drop_cold]}
  pair: {operators: [near]}
"""

UNION = """\
name: xunion-{u}
streams:
  a: {schema: reading, key: sensor, partitions: 2}
  b: {schema: reading, key: sensor, partitions: 3}
  a2: {schema: reading, key: sensor, partitions: 2}
  b2: {schema: reading, key: sensor, partitions: 3}
  both: {schema: reading, key: sensor, partitions: 2}
  stats: {schema: window_stat, key: key, partitions: 2}
operators:
  fa: {type: filter, input: a, output: a2, where: "value > -50"}
  fb: {type: filter, input: b, output: b2, where: "value > -50"}
  merge: {type: union, inputs: [a2, b2], output: both}
  per_sensor: {type: window, input: both, output: stats, key: sensor, size: 400, slide: 200,
               aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  na: {operators: [fa]}
  nb: {operators: [fb]}
  nu: {operators: [merge, per_sensor]}
"""


def test_a_join_of_two_streams_keyed_differently_equals_the_reference(kafka, tmp_path: Path) -> None:
    """readings split by sensor in 2 partitions join sites split by building in 3: readings cross an
    exchange to the join's building partitions, and every pair is the reference's, per partition."""
    spec, _ = unique_spec(JOIN, tmp_path)
    create_topics(spec, kafka.bootstrap)
    inputs = {
        "readings": preload(spec, kafka.bootstrap, "readings", list(located(1500, step_ms=4, seed=5))),
        "sites": preload(spec, kafka.bootstrap, "sites", list(located(1500, step_ms=4, seed=6))),
    }
    run_nodes_until_idle(spec, kafka.bootstrap)
    want = evaluate(spec, inputs, ended=True)
    got = by_partition(read_stream(spec, "pairs", kafka.bootstrap, expect=sum(map(len, want["pairs"]))), 3)
    for p in range(3):
        assert canonical([t.value for t in got[p]]) == canonical(want["pairs"][p]), f"pairs partition {p} differs"
        assert [t.meta.id for t in got[p]] == list(range(len(got[p])))
    assert all(want["pairs"]), "every partition has pairs"


def test_a_union_of_streams_with_different_partition_counts_equals_the_reference(kafka, tmp_path: Path) -> None:
    """a (2 partitions) and b (3) into a union and window of 2 partitions: b crosses an exchange, and
    the window after the union sees each sensor's readings of both streams in one partition."""
    spec, _ = unique_spec(UNION, tmp_path)
    create_topics(spec, kafka.bootstrap)
    inputs = {
        s: preload(spec, kafka.bootstrap, s, list(readings(1500, sensors=12, step_ms=4, seed=i)))
        for i, s in enumerate(("a", "b"))
    }
    run_nodes_until_idle(spec, kafka.bootstrap)
    want = evaluate(spec, inputs, ended=True)
    got = by_partition(read_stream(spec, "stats", kafka.bootstrap, expect=sum(map(len, want["stats"]))), 2)
    for p in range(2):
        assert [t.value for t in got[p]] == want["stats"][p], f"stats partition {p} differs from the reference"
    assert all(want["stats"])
