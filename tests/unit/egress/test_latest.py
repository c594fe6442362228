"""The latest egress over a real reader's view (``PartitionView``) and a fake transactional writer:
materializing what it committed (the newest record per key, a tombstone deleting) gives the tentative
answers during a failure and exactly the failure-free results once the corrections are in."""

from __future__ import annotations

from typing import Any

from services.client.partition import PartitionView, ViewEvent
from services.core.tuples import BOUNDARY, REC_DONE, STABLE, TENTATIVE, UNDO, TupleType
from services.egress.latest import KIND_HEADER, LatestEgress, identity_for
from services.egress.records import PlainRecords
from services.spec import parse_spec

SPEC = parse_spec("""\
name: s
streams:
  a: {schema: reading, key: sensor}
  w: {schema: window_stat, key: key}
operators:
  win: {type: window, input: a, output: w, key: sensor, size: 100, slide: 100, aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win], replicas: 2}
""")


class Writer:
    """Committed records in order, as a read_committed consumer sees them."""

    def __init__(self) -> None:
        self.open = False
        self.pending: list[tuple[bytes | None, bytes | None, Any]] = []
        self.committed: list[tuple[bytes | None, bytes | None, Any]] = []

    def begin(self) -> None:
        self.open = True

    def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int = -1, headers=None
    ) -> None:
        assert self.open and (topic, partition) == ("s.w.latest", 0)
        self.pending.append((key, value, dict(headers)))

    def commit(self, timeout: float = 30) -> None:
        self.committed += self.pending
        self.pending, self.open = [], False

    def table(self) -> dict[bytes | None, tuple[bytes, bytes]]:
        """The topic materialized: newest value and kind per key, a tombstone deleting the key."""
        out: dict[bytes | None, tuple[bytes, bytes]] = {}
        for key, value, headers in self.committed:
            if value is None:
                out.pop(key, None)
            else:
                out[key] = (value, headers[KIND_HEADER])
        return out


def _win(key: str, start: int, count: int) -> dict:
    return {
        "key": key,
        "window_start": start,
        "window_end": start + 100,
        "count": count,
        "sum": 0.0,
        "avg": 0.0,
        "min": 0.0,
        "max": 0.0,
    }


Step = tuple[TupleType, int, int, dict | None]


def _run(steps: list[Step]) -> tuple[Writer, LatestEgress]:
    w = Writer()
    egress = LatestEgress(w, PlainRecords("window_stat", "key", "json"), identity_for(SPEC, "w"), "s.w.latest", 0, 0.1)
    view = PartitionView(0, None)
    for ttype, tid, stime, rec in steps:
        out: list[ViewEvent] = []
        view.apply(ttype, tid, stime, rec, out, 0)
        for ev in out:
            egress.event(ev, 0.0)
        egress.passed(view.boundary, 0.0)
    egress.tick(1.0)
    return w, egress


FAILURE_FREE: list[Step] = [
    (STABLE, i, r["window_end"], r)
    for i, r in enumerate([_win("a", 0, 3), _win("b", 0, 2), _win("a", 100, 4), _win("b", 100, 1), _win("a", 200, 2)])
] + [(BOUNDARY, 4, 400, None)]

FAILURE: list[Step] = [  # results 2..4 first tentative (b's input late: a made-up c, a short a), then corrected
    *FAILURE_FREE[:2],
    (TENTATIVE, 2, 200, _win("a", 100, 3)),
    (TENTATIVE, 3, 200, _win("c", 100, 1)),
    (TENTATIVE, 4, 300, _win("a", 200, 1)),
]
HEAL: list[Step] = [(UNDO, 1, 0, None), *FAILURE_FREE[2:], (REC_DONE, 4, 0, None)]


def test_during_a_failure_the_table_holds_the_tentative_answers() -> None:
    w, _ = _run(FAILURE)
    table = w.table()
    assert table[b"a@100"][1] == b"tentative" and table[b"c@100"][1] == b"tentative"
    assert table[b"a@0"][1] == b"stable" and len(table) == 5


def test_after_the_corrections_the_table_is_the_failure_free_results_exactly() -> None:
    healed, egress = _run(FAILURE + HEAL)
    clean, _ = _run(FAILURE_FREE)
    assert healed.table() == clean.table()
    assert all(kind == b"stable" for _, kind in healed.table().values())
    assert egress.tombstones == 1  # c@100: the corrections did not give it back


def test_a_voided_result_is_kept_until_the_boundary_passes_it() -> None:
    w, egress = _run(FAILURE + [(UNDO, 1, 0, None), FAILURE_FREE[2]])  # corrections up to a@100 only
    assert b"c@100" in w.table() and egress.tombstones == 0, "c@100 may still come: the boundary is before it"
