"""The header codec: what one writer writes, every reader reads back; bad headers say what is wrong."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.core.errors import HeaderError
from services.core.tuples import (
    TupleType,
    deadletter_headers,
    header_writer,
    make_headers,
    parse_headers,
    peek_type_and_id,
    read_headers,
)


@given(st.sampled_from(list(TupleType)), st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 9))
def test_written_headers_read_back(ttype: TupleType, tid: int, stime: int, replica: int) -> None:
    h = header_writer(replica, epoch=7)(ttype, tid, stime)
    assert h == make_headers(ttype, tid, stime, replica, 7)
    assert read_headers(h) == (ttype, tid, stime, None)
    meta = parse_headers(h)
    assert (meta.type, meta.id, meta.stime, meta.replica, meta.epoch) == (ttype, tid, stime, replica, 7)
    assert peek_type_and_id(h) == (ttype, tid)


@pytest.mark.parametrize(
    "headers,reason",
    [
        (None, "missing ht.* headers"),
        ([("ht.id", b"1"), ("ht.stime", b"2")], "missing ht.type header"),
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
    from services.core.tuples import EPOCH, STABLE, EpochGate, admit

    old, new = header_writer(0, epoch=3), header_writer(0, epoch=5)
    log = [old(STABLE, 0, 1), old(STABLE, 1, 2), new(EPOCH, -1, 0), old(STABLE, 2, 3), new(STABLE, 2, 4)]
    gate = EpochGate()
    got = [admit(h, gate) for h in log]
    assert got == [(STABLE, 0, 1, None), (STABLE, 1, 2, None), (EPOCH, -1, 0, None), None, (STABLE, 2, 4, None)]
    assert (gate.epoch, gate.fenced) == (5, 1)


def test_a_gate_starts_at_the_epoch_in_force_where_the_reader_starts() -> None:
    from services.core.tuples import STABLE, EpochGate, admit

    gate = EpochGate(5)
    assert admit(header_writer(0, epoch=3)(STABLE, 9, 1), gate) is None
    assert admit(make_headers(STABLE, 9, 1, epoch=5), gate) == (STABLE, 9, 1, None)
    assert gate.fenced == 1


def test_admit_says_what_is_wrong_with_bad_headers() -> None:
    from services.core.tuples import EpochGate, admit

    with pytest.raises(HeaderError, match="malformed header value"):
        admit([("ht.type", b"STABLE"), ("ht.id", b"1"), ("ht.stime", b"2"), ("ht.epoch", b"x")], EpochGate())
    with pytest.raises(HeaderError, match="missing ht.\\* headers"):
        admit(None, EpochGate())


def test_peek_reads_the_epoch_and_tolerates_its_absence() -> None:
    from services.core.tuples import STABLE, peek

    assert peek(make_headers(STABLE, 4, 1, epoch=12)) == (STABLE, 4, 12)
    assert peek([("ht.type", b"UNDO")]) == (TupleType.UNDO, None, 0)
