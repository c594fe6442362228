"""The header codec: what one writer writes, every reader reads back; bad headers say what is wrong."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.core.errors import HeaderError
from services.core.tuples import (
    STABLE,
    TENTATIVE,
    EpochGate,
    Headers,
    TupleType,
    admit,
    carries_bound,
    deadletter_headers,
    header_writer,
    make_headers,
    parse_headers,
    peek_type_and_id,
    read_headers,
    tmax_of,
    with_bound,
    with_tmax,
)

times = st.integers(-(2**62), 2**62)


@given(st.sampled_from(list(TupleType)), st.integers(-1, 2**62), times, st.integers(0, 9), st.integers(0, 2**40))
def test_written_headers_read_back(ttype: TupleType, tid: int, stime: int, replica: int, epoch: int) -> None:
    h = header_writer(replica, epoch, b"reading:00ff%d")(ttype, tid, stime)
    assert len(h) == 1, "one header per tuple"
    assert make_headers(ttype, tid, stime, replica, epoch) == header_writer(replica, epoch)(ttype, tid, stime)
    assert read_headers(h) == (ttype, tid, stime, None)
    assert admit(h, EpochGate(epoch)) == (ttype, tid, stime, None)
    meta = parse_headers(h)
    assert (meta.type, meta.id, meta.stime, meta.replica, meta.epoch) == (ttype, tid, stime, replica, epoch)
    assert (meta.bound, meta.tmax, meta.schema) == (None, None, "reading:00ff%d")
    assert peek_type_and_id(h) == (ttype, tid)
    assert not carries_bound(h) and tmax_of(h) is None


@given(st.integers(0, 2**62), times, times)
def test_a_bound_rides_on_a_stable_tuple_and_a_tmax_on_a_tentative_one(tid: int, stime: int, extra: int) -> None:
    w = header_writer(1, 2)
    b = with_bound(w(STABLE, tid, stime), extra)
    assert read_headers(b) == admit(b, EpochGate(2)) == (STABLE, tid, stime, extra)
    assert carries_bound(b) and parse_headers(b).bound == extra and tmax_of(b) is None
    t = with_tmax(w(TENTATIVE, tid, stime), extra)
    assert read_headers(t) == admit(t, EpochGate(2)) == (TENTATIVE, tid, stime, None)
    assert tmax_of(t) == extra and not carries_bound(t)


def test_the_older_form_one_header_per_field_is_read_alike() -> None:
    older: Headers = [
        ("ht.type", b"STABLE"),
        ("ht.id", b"4"),
        ("ht.stime", b"90"),
        ("ht.replica", b"1"),
        ("ht.epoch", b"3"),
        ("ht.bound", b"100"),
    ]
    packed = with_bound(header_writer(1, 3)(STABLE, 4, 90), 100)
    assert read_headers(older) == read_headers(packed) == (STABLE, 4, 90, 100)
    assert admit(older, EpochGate(3)) == admit(packed, EpochGate(3))
    assert admit(older, EpochGate(4)) is None
    assert parse_headers(older) == parse_headers(packed)
    assert tmax_of([("ht.type", b"TENTATIVE"), ("ht.id", b"1"), ("ht.stime", b"2"), ("ht.tmax", b"7")]) == 7


def test_the_packed_header_is_found_among_others_and_in_a_dict() -> None:
    h = [("trace", b"x"), *header_writer(0, 1)(STABLE, 3, 5)]
    assert read_headers(h) == admit(h, EpochGate(1)) == (STABLE, 3, 5, None)
    assert read_headers(dict(h)) == (STABLE, 3, 5, None)


@pytest.mark.parametrize(
    "value,reason",
    [
        (b"STABLE,1,2", "has 3 fields"),
        (b"STABLE,1,2,0,0,s,9,9", "has 8 fields"),
        (b"NOPE,1,2,0,0,", "unknown tuple type"),
        (b"STABLE,x,2,0,0,", "malformed header value in ht"),
        (b"STABLE,1,2,0,0,,y", "malformed header value in ht"),
    ],
)
def test_a_bad_packed_header_says_what_is_wrong(value: bytes, reason: str) -> None:
    bad: Headers = [("ht", value)]
    for read in (read_headers, lambda h: admit(h, EpochGate()), parse_headers):
        with pytest.raises(HeaderError, match=reason):
            read(bad)


def test_a_bad_epoch_fails_whoever_follows_epochs() -> None:
    """read_headers does not look at the epoch, as it never did; admit and parse_headers do."""
    bad: Headers = [("ht", b"STABLE,1,2,0,x,")]
    assert read_headers(bad) == (STABLE, 1, 2, None)
    for read in (lambda h: admit(h, EpochGate()), parse_headers):
        with pytest.raises(HeaderError, match="malformed header value in ht"):
            read(bad)


@pytest.mark.parametrize(
    "headers,reason",
    [
        (None, "missing ht header"),
        ([("ht.id", b"1"), ("ht.stime", b"2")], "missing ht header \\(or ht.type\\)"),
        ([("ht.type", b"STABLE"), ("ht.stime", b"2")], "missing ht.id header"),
        ([("ht.type", b"NOPE"), ("ht.id", b"1"), ("ht.stime", b"2")], "unknown tuple type"),
        ([("ht.type", b"STABLE"), ("ht.id", b"x"), ("ht.stime", b"2")], "malformed header value"),
    ],
)
def test_bad_headers_say_what_is_wrong(headers: list | None, reason: str) -> None:
    with pytest.raises(HeaderError, match=reason):
        read_headers(headers)


def test_peek_tolerates_what_read_refuses() -> None:
    assert peek_type_and_id([("ht.type", b"UNDO")]) == (TupleType.UNDO, None)
    assert peek_type_and_id(None) == (None, None)


def test_deadletter_headers_keep_the_original_and_add_why_whence_and_who() -> None:
    h = deadletter_headers([("x", b"1")], "bad", "t", 2, 40, "spec.n1.r1.p2")
    assert h == [
        ("x", b"1"),
        ("ht.error", b"bad"),
        ("ht.src.topic", b"t"),
        ("ht.src.partition", b"2"),
        ("ht.src.offset", b"40"),
        ("ht.rejected.by", b"spec.n1.r1.p2"),
    ]


def test_a_reader_drops_what_an_older_epoch_writes_after_a_newer_one_appeared() -> None:
    """A replaced copy of a writer (epoch 3) resumes after its successor (epoch 5) announced itself:
    its messages are dropped and counted, the successor's and everything before it are taken."""
    from services.core.tuples import EPOCH

    old, new = header_writer(0, epoch=3), header_writer(0, epoch=5)
    log = [old(STABLE, 0, 1), old(STABLE, 1, 2), new(EPOCH, -1, 0), old(STABLE, 2, 3), new(STABLE, 2, 4)]
    gate = EpochGate()
    got = [admit(h, gate) for h in log]
    assert got == [(STABLE, 0, 1, None), (STABLE, 1, 2, None), (EPOCH, -1, 0, None), None, (STABLE, 2, 4, None)]
    assert (gate.epoch, gate.fenced) == (5, 1)


def test_a_gate_starts_at_the_epoch_in_force_where_the_reader_starts() -> None:
    gate = EpochGate(5)
    assert admit(header_writer(0, epoch=3)(STABLE, 9, 1), gate) is None
    assert admit(make_headers(STABLE, 9, 1, epoch=5), gate) == (STABLE, 9, 1, None)
    assert gate.fenced == 1


def test_admit_says_what_is_wrong_with_bad_headers() -> None:
    with pytest.raises(HeaderError, match="malformed header value"):
        admit([("ht.type", b"STABLE"), ("ht.id", b"1"), ("ht.stime", b"2"), ("ht.epoch", b"x")], EpochGate())
    with pytest.raises(HeaderError, match="missing ht header"):
        admit(None, EpochGate())


def test_peek_reads_the_epoch_and_tolerates_its_absence() -> None:
    from services.core.tuples import peek

    assert peek(make_headers(STABLE, 4, 1, epoch=12)) == (STABLE, 4, 12)
    assert peek([("ht.type", b"UNDO")]) == (TupleType.UNDO, None, 0)
