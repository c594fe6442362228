"""The DPC reader contract, the one both a node's intake and a client's view judge messages by."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from services.client.partition import PartitionView
from services.core.tuples import BOUNDARY, STABLE, TENTATIVE, EpochGate, make_headers, with_tmax
from services.dpc.contract import Verdict, judge


@dataclass
class Reader:
    last_stable: int = -1
    skip_upto: int | None = None
    fresh: int | None = None
    gate: EpochGate = field(default_factory=EpochGate)
    fresh_gate: EpochGate = field(default_factory=EpochGate)


def verdict(reader: Reader, headers: object, fresh: bool = False, first_any: bool = False) -> Verdict:
    return judge(reader, headers, fresh, first_any)[0]  # type: ignore[arg-type]


def test_stable_ids_are_taken_once_each_in_order() -> None:
    r = Reader(last_stable=4)
    assert verdict(r, make_headers(STABLE, 5, 0)) is Verdict.NEW
    assert verdict(r, make_headers(STABLE, 4, 0)) is Verdict.DUPLICATE
    assert verdict(r, make_headers(STABLE, 7, 0)) is Verdict.GAP
    assert verdict(r, make_headers(STABLE, 7, 0), first_any=True) is Verdict.NEW


def test_a_replaced_writer_is_fenced_on_the_connection_it_came_on() -> None:
    r = Reader()
    assert verdict(r, make_headers(STABLE, 0, 0, epoch=3)) is Verdict.NEW
    assert verdict(r, make_headers(STABLE, 1, 0, epoch=2)) is Verdict.FENCED
    assert verdict(r, make_headers(STABLE, 0, 0, epoch=2), fresh=True) is Verdict.NEW  # the fresh log's own gate


def test_tentative_tuples_count_only_if_they_are_news() -> None:
    r = Reader(last_stable=4, skip_upto=30)
    assert verdict(r, with_tmax(make_headers(TENTATIVE, 5, 0), 31)) is Verdict.NEW
    assert verdict(r, with_tmax(make_headers(TENTATIVE, 5, 0), 30)) is Verdict.HELD  # rule 3
    assert verdict(r, with_tmax(make_headers(TENTATIVE, 4, 0), 40)) is Verdict.STABLE_ALREADY
    r.fresh = 1  # rule 4: a fresh replica supplies the new ones
    assert verdict(r, with_tmax(make_headers(TENTATIVE, 6, 0), 40)) is Verdict.RECONCILING
    assert verdict(r, with_tmax(make_headers(TENTATIVE, 3, 0), 40), fresh=True) is Verdict.NEW


def test_boundaries_and_controls_go_to_the_reader() -> None:
    got = judge(Reader(), make_headers(BOUNDARY, 0, 50), False, False)
    assert got[0] is Verdict.CONTROL and got[1] is not None and got[1][2] == 50


@given(st.lists(st.integers(0, 12), max_size=40))
def test_a_client_view_takes_exactly_the_stable_tuples_the_contract_calls_new(ids: list[int]) -> None:
    """The view keeps a stable tuple if and only if the contract, judging it with the view's own
    state, calls it new: the two readers cannot drift apart."""
    view = PartitionView(tentative=False)
    for tid in ids:
        expected = judge(view, make_headers(STABLE, tid, tid), False, not view.started)[0]
        before = len(view.stable)
        view.take(make_headers(STABLE, tid, tid), tid, [])
        assert (len(view.stable) == before + 1) == (expected is Verdict.NEW and view.gap is None)
        if view.gap is not None:
            break
