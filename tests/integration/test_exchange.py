"""Exchange edges on the real broker: a network that re-keys twice equals the reference evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.client.source import END_OF_TIME, SourceWriter
from services.client.workload import located
from services.core.partitioner import key_bytes, partition_for
from services.core.tuples import TupleType
from services.operators.reference import evaluate
from tests.integration.helpers import by_partition, create_topics, read_stream, run_nodes_until_idle, unique_spec

pytestmark = pytest.mark.integration

REKEY = (Path(__file__).parents[2] / "examples" / "rekey.yaml").read_text().replace("name: rekey", "name: rekey-{u}")


def test_a_network_that_rekeys_twice_equals_the_reference_partition_by_partition(kafka, tmp_path: Path) -> None:
    """sensor (2 partitions) -> building (3) -> region (4): each node partition's output is the
    reference's for the keys routed to it, tuple for tuple, with dense ids from 0."""
    spec, _ = unique_spec(REKEY, tmp_path)
    create_topics(spec, kafka.bootstrap)
    inputs: list[list[dict]] = [[], []]
    w = SourceWriter(spec, "readings", kafka.bootstrap)
    for rec in located(4000, step_ms=2, seed=3):
        w.send(rec)
        inputs[partition_for(key_bytes(rec["sensor"]), 2)].append(rec)
    w.boundary(END_OF_TIME)
    w.flush()

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
