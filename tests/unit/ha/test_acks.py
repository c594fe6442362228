"""Upstream backup's acknowledgements and the trimming rule (ICDE 2005, section 5.2): a log is
never trimmed past a tuple the current primary of any of its readers would read again."""

from __future__ import annotations

from services.ha.acks import Ack, Needed, Needs, newest_usable


def _ack(
    node: str = "n",
    epoch: int = 1,
    offsets: dict[str, int] | None = None,
    outputs: dict[str, int] | None = None,
    ms: int = 0,
) -> Ack:
    offsets = offsets if offsets is not None else {"in": 0}
    return Ack(node, 0, epoch, 1000, {t: o for t, o in offsets.items()}, offsets, outputs or {"out": 0}, ms)


def test_an_ack_goes_through_avro_unchanged() -> None:
    a = Ack(
        "n", 2, 77, 5100, {"s.a": 40, "s.b": 3}, {"s.a": 52, "s.b": 3}, {"out": 19}, 1_700_000_000_000, {"s.a": 5000}
    )
    assert Ack.decode(a.encode()) == a
    assert a.key == b"n/p2/e77"
    assert a.restamped(80, 5).key == b"n/p2/e80" and a.restamped(80, 5).input_offsets == a.input_offsets


def test_needs_names_the_oldest_tuple_in_state_and_an_offset_before_it() -> None:
    needs = Needs(100)
    needs.start("in", 0, 0)
    needs.processed("in", 1000, 0)
    needs.processed("in", 1100, 4)
    needs.read("in", 9, 12, 1190)  # ids 0..9 read; boundaries between them: the next offset is 12
    needs.processed("in", 1200, 8)
    # Operator time 1200, state from 1100 on: ids 4.. are needed, the last poll before them started at 0.
    assert needs.cut(1100, 1200, {}) == Needed({"in": 4}, {"in": 0}, {})
    needs.read("in", 20, 25, 1350)
    # No state left and nothing waiting: only what is not read yet, from the offset after id 20,
    # past the boundary read then, which the rebuild therefore takes from the ack.
    assert needs.cut(None, 1300, {}) == Needed({"in": 21}, {"in": 25}, {"in": 1350})
    # A tuple held in SUnion, not processed yet, is needed too.
    assert needs.cut(None, 1300, {"in": 18}) == Needed({"in": 18}, {"in": 25}, {"in": 1350})


def test_a_poll_of_boundaries_alone_moves_the_acknowledged_place_on() -> None:
    """An input that stops after a boundary (a source idle for a while) is acknowledged up to its end, so
    the trims can take its log down to its writer's tail; before, the place stayed after the poll that
    read the last tuple, and the boundaries after it were kept."""
    needs = Needs(100)
    needs.start("in", 0, 0)
    needs.read("in", 9, 10, 1190)  # ids 0..9 at offsets 0..9
    needs.read("in", 9, 12, 1500)  # two boundaries, the last at 1500
    assert needs.cut(None, 1500, {}) == Needed({"in": 10}, {"in": 12}, {"in": 1500})
    needs.read("in", 9, 11, 1500)  # a place never goes back
    assert needs.cut(None, 1500, {}).offsets == {"in": 12}


def test_a_tuple_read_out_of_time_order_is_still_needed() -> None:
    """Ids need not grow with tuple time: the smallest id of every bucket the state reaches counts."""
    needs = Needs(100)
    needs.start("in", 0, 0)
    needs.read("in", 5, 6, None)
    needs.processed("in", 1000, 3)
    needs.processed("in", 1100, 1)  # id 1 had a later tuple time than ids 2 and 3
    assert needs.cut(1000, 1200, {}).ids == {"in": 1}
    assert needs.cut(1100, 1200, {}).ids == {"in": 1}


def test_a_takeover_resumes_from_the_newest_ack_whose_output_the_log_holds() -> None:
    old = _ack(epoch=3, outputs={"out": 10}, ms=1)
    newer = _ack(epoch=3, outputs={"out": 20}, ms=2)
    # A paused primary woke up and acked output it wrote after it was fenced, which readers drop.
    zombie = _ack(epoch=3, outputs={"out": 31}, ms=3)
    assert newest_usable([old, zombie, newer], {"out": 25}) == newer
    assert newest_usable([old, newer], {"out": 5}) is None  # nothing usable: from the inputs' start
    assert newest_usable([old], {"out": None}) is None
    assert newest_usable([_ack(epoch=3, outputs={"out": 0})], {"out": None}) is not None  # nothing written before it
    later_epoch = _ack(epoch=9, outputs={"out": 12}, ms=0)
    assert newest_usable([newer, later_epoch], {"out": 25}) == later_epoch
