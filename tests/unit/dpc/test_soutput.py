"""SOutput: dense stable ids, duplicate elimination after a restart, UNDO / REC_DONE placement."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.core.tuples import TupleType
from services.dpc.soutput import Out, RestartMismatch, SOutput

S, T, U, R, B = TupleType.STABLE, TupleType.TENTATIVE, TupleType.UNDO, TupleType.REC_DONE, TupleType.BOUNDARY


def items(lo: int, hi: int) -> list[tuple[Any, int]]:
    return [({"v": i}, i) for i in range(lo, hi)]


def feed(so: SOutput, seq: list[tuple[Any, int]], cuts: list[int], out: list) -> None:
    """Give ``seq`` to SOutput in batches split at ``cuts``."""
    prev = 0
    for c in sorted(set(c for c in cuts if 0 < c < len(seq))) + [len(seq)]:
        so.stable(seq[prev:c], out)
        prev = c


def stable_ids(out: list) -> list[int]:
    return [m[1] for m in out if m[0] is S]


def in_topic(out: list) -> dict[int, tuple[int, Any]]:
    """What a restart reads back from the topic: id -> (stime, payload) of its stable tuples."""
    return {m[1]: (m[2], m[3]) for m in out if m[0] is S}


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 60), data=st.data())
def test_restart_from_checkpoint_writes_each_stable_tuple_once(n: int, data: Any) -> None:
    seq = items(0, n)
    ckpt = data.draw(st.integers(0, n), label="checkpoint after")
    crash = data.draw(st.integers(ckpt, n), label="crash after")
    tentative = data.draw(st.integers(0, 5), label="tentative tuples before the crash")
    topic: list = []
    first = SOutput()
    first.stable(seq[:ckpt], topic)
    state = first.state()
    first.stable(seq[ckpt:crash], topic)
    first.tentative(items(1000, 1000 + tentative), topic)
    # kill -9, restart from the checkpoint, replay the input since then in any batches
    second = SOutput(*state)
    topic += second.restarted(crash - 1, in_topic(topic))
    feed(second, seq[ckpt:], data.draw(st.lists(st.integers(0, n), max_size=6), label="cuts"), topic)
    ids = stable_ids(topic)
    assert ids == list(range(n)), "every stable id exactly once, in order"
    assert [m[3] for m in topic if m[0] is S] == [r for r, _ in seq]
    undos = [m for m in topic if m[0] is U]
    assert undos and undos[-1][1] == crash - 1, "the restart retracts whatever followed the last stable tuple"


def test_undo_names_last_stable_and_corrections_continue_ids() -> None:
    so = SOutput()
    out: list[Out] = []
    so.stable(items(0, 3), out)
    so.tentative(items(100, 103), out)
    assert [(m[0], m[1]) for m in out[3:]] == [(T, 3), (T, 4), (T, 5)], "tentative ids continue after the last stable"
    so.undo(out)
    so.stable(items(3, 5), out)
    so.rec_done(out)
    assert [(m[0], m[1]) for m in out[6:]] == [(U, 2), (S, 3), (S, 4), (R, 4)]


def test_new_failure_before_rec_done_forces_rec_done_between_stable_and_tentative() -> None:
    so = SOutput()
    out: list[Out] = []
    so.tentative(items(0, 2), out)
    so.undo(out)
    so.stable(items(0, 1), out)
    so.tentative(items(50, 51), out)  # failed again before catching up
    kinds = [m[0] for m in out]
    assert kinds == [T, T, U, S, R, T]
    assert out[-1][1] == 1, "the new tentative tuple follows stable 0"


def test_undo_without_tentative_output_sends_nothing() -> None:
    so = SOutput()
    out: list[Out] = []
    so.stable(items(0, 2), out)
    so.undo(out)
    so.rec_done(out)
    assert [m[0] for m in out] == [S, S]


def test_boundaries_increase_and_wait_for_corrections() -> None:
    so = SOutput()
    out: list[Out] = []
    so.boundary(100, out)
    so.boundary(100, out)
    so.boundary(50, out)
    so.tentative(items(0, 1), out)
    so.boundary(200, out)  # corrections with smaller stime are still to come
    so.undo(out)
    so.boundary(200, out)
    assert [(m[0], m[2]) for m in out if m[0] is B] == [(B, 100), (B, 200)]


def test_tentative_output_is_dropped_while_replaying_duplicates() -> None:
    so = SOutput(0)
    out: list[Out] = []
    so.restarted(9, {i: (i, {"v": i}) for i in range(10)})
    so.stable(items(0, 5), out)
    so.tentative(items(100, 102), out)
    assert out == [], "ids 0..4 are in the topic already; tentative tuples there would be undone"
    so.stable(items(5, 12), out)
    assert stable_ids(out) == [10, 11]


def test_a_replay_that_regenerates_other_tuples_stops_the_restart_instead_of_renumbering() -> None:
    """The review's scenario: the restart replays input from a later point (the start was trimmed),
    so the first tuples it regenerates are not the ones the topic holds under those ids."""
    topic: list = []
    SOutput().stable(items(0, 10), topic)
    second = SOutput()
    second.restarted(9, in_topic(topic))
    with pytest.raises(RestartMismatch, match="stable tuple 0"):
        second.stable(items(4, 12), [])  # input 0..3 is gone: tuple 4 comes back as id 0


def test_a_restart_refuses_when_the_ids_to_check_are_not_in_the_topic() -> None:
    topic: list = []
    SOutput().stable(items(0, 10), topic)
    held = in_topic(topic)
    del held[3]
    so = SOutput()
    so.restarted(9, held, "out.r0[0]")  # the log is read as the replay reaches it (ha-review D10)
    with pytest.raises(RestartMismatch, match="3..3 are missing"):
        so.stable(items(0, 10), [])


def test_a_restart_past_which_the_log_was_trimmed_says_so_in_one_line() -> None:
    topic: list = []
    SOutput().stable(items(0, 10), topic)
    held = {i: v for i, v in in_topic(topic).items() if i >= 5}  # ids 0..4 trimmed away
    with pytest.raises(
        RestartMismatch, match=r"stable tuples 0..4 are gone from the log \(it now starts at stable id 5\)"
    ):
        SOutput().restarted(9, held, "out.r0[0]")
