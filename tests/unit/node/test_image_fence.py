"""A replaced passive standby primary that wakes up in the middle of a checkpoint (ha-review D9): its
image writer checks the fence before every send and stops, and a follower never moves back onto an
older writer's chain."""

from __future__ import annotations

from typing import Any

from services.core.errors import FencedError
from services.ha.follower import Follower
from services.log.images import manifest_key
from tests.unit.node.test_restart import TOPIC, FakeLog, delta, image, load, log, write, write_delta, writer

__all__ = ["log"]  # the fixture


class Fence:
    """Raises once ``after`` checks have passed: a newer writer claimed the partition meanwhile."""

    def __init__(self, after: int) -> None:
        self.after = after

    def __call__(self) -> None:
        if self.after <= 0:
            raise FencedError("replaced by a newer incarnation or replica")
        self.after -= 1


def test_a_writer_fenced_in_the_middle_of_an_image_sends_no_further_chunk_nor_its_manifest(log: FakeLog) -> None:
    w = writer(log)
    write(w, image(2, 1, chain=5, seq=1))
    sent = len(log.msgs)
    w.fence = Fence(after=2)  # passes before the tombstones and the first chunk, then the successor claims
    write(w, image(3, 2, chain=5, seq=2))
    assert w.fenced is not None and len(log.msgs) == sent + 1  # one chunk went, then it stopped
    assert all(m.key() != manifest_key(0) for m in log.msgs[sent:])
    write_delta(w, delta(5, 3))
    write(w, image(2, 3, chain=5, seq=4))
    assert len(log.msgs) == sent + 1 and not w.busy  # nothing more, and no image left in flight
    assert load() == image(2, 1, chain=5, seq=1)


def test_a_fenced_writer_sends_no_delta(log: FakeLog) -> None:
    w = writer(log)
    write(w, image(2, 1, chain=5, seq=1))
    sent = len(log.msgs)
    w.fence = Fence(after=0)
    write_delta(w, delta(5, 2))
    assert w.fenced is not None and len(log.msgs) == sent and w.failed == 0


def test_a_follower_does_not_move_back_onto_an_older_writers_chain(log: FakeLog) -> None:
    """The old primary (epoch 3) finishes an image after its successor (epoch 8) wrote its own: a
    follower stays on the successor's chain."""
    old, new = writer(log), writer(log)
    old.epoch, new.epoch = 3, 8
    write(old, image(2, 1, chain=5, seq=1))
    took: list[Any] = []
    f = Follower("unused:9092", TOPIC, 0, lambda img: took.append((img.chain, img.seq)), took.append)
    write(new, image(2, 2, chain=9, seq=1))
    write_delta(new, delta(9, 2))
    write(old, image(2, 3, chain=5, seq=2))  # the zombie's image, after the successor's
    write_delta(new, delta(9, 3))
    st = f.catch_up()
    assert st is not None and (st.chain, st.seq) == (9, 3)
    assert took[:2] == [(5, 1), (9, 1)] and (5, 2) not in took
