"""The stable egress over a fake transactional writer: each id once, in order, in timed transactions."""

from __future__ import annotations

import re
import time

import pytest

from services.core.errors import InputGapError
from services.egress.pump import commit_summary
from services.egress.records import PlainRecords, record_id
from services.egress.stable import StableEgress


class FakeWriter:
    """The transactional writer's calls, with what each committed transaction held (as a read_committed
    consumer would see them: nothing of a transaction until its commit)."""

    def __init__(self) -> None:
        self.open = False
        self.pending: list[int] = []
        self.committed: list[list[int]] = []

    def begin(self) -> None:
        assert not self.open, "begin inside an open transaction"
        self.open = True

    def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int = -1, headers=None
    ) -> None:
        assert self.open, "a send outside a transaction"
        assert (topic, partition) == ("s.out.stable", 2)
        rid = record_id(headers)
        assert rid is not None
        self.pending.append(rid)

    def commit(self, timeout: float = 30) -> None:
        assert self.open
        self.committed.append(self.pending)
        self.pending, self.open = [], False


def _rec(i: int) -> dict:
    return {"sensor": "s1", "ts": i, "value": 1.0, "seq": i}


def _egress(after: int | None = None) -> tuple[FakeWriter, StableEgress]:
    w = FakeWriter()
    return w, StableEgress(w, PlainRecords("reading", "sensor", "json"), "s.out.stable", 2, 0.1, after)


def test_ids_read_again_are_written_once_and_batches_commit_at_most_every_interval() -> None:
    w, e = _egress()
    e.take(0, 0, _rec(0), 0.0)
    assert e.tick(0.0), "nothing committed for an interval: at once"
    for i, now in [(1, 0.05), (1, 0.06), (0, 0.07), (2, 0.08)]:  # a switch reads 0 and 1 again
        e.take(i, i, _rec(i), now)
        assert not e.tick(now), "an interval from the last commit's start, not from the batch's first record"
    assert w.committed == [[0]] and w.pending == [1, 2]
    assert e.tick(0.1)
    e.take(3, 3, _rec(3), 0.15)
    assert not e.tick(0.19) and e.tick(0.2)
    assert w.committed == [[0], [1, 2], [3]]
    assert not e.tick(1.0), "nothing open: nothing to commit"


def test_a_new_primary_goes_on_after_the_committed_tail() -> None:
    w, e = _egress(after=4)
    for i in range(0, 7):
        e.take(i, i, _rec(i))
    e.flush()
    assert w.committed == [[5, 6]]


def test_a_gap_in_the_stable_ids_is_a_clear_error_not_lost_output() -> None:
    _, e = _egress(after=4)
    with pytest.raises(InputGapError, match=r"s.out.stable\[2\]: stable id 7 came after 4: ids 5..6 are missing"):
        e.take(7, 7, _rec(7))


class SlowWriter(FakeWriter):
    """A writer whose commits take ``ms`` each, as a loaded broker's do."""

    def __init__(self, ms: float) -> None:
        super().__init__()
        self.ms = ms

    def commit(self, timeout: float = 30) -> None:
        time.sleep(self.ms / 1000)
        super().commit(timeout)


def test_each_commit_is_timed_and_a_stopping_pump_tells_how_long_they_took() -> None:
    """A record waits for the commit it goes in: the summary says how long commits took, once, at the end."""
    w = SlowWriter(20)
    e = StableEgress(w, PlainRecords("reading", "sensor", "json"), "s.out.stable", 2, 0.1, None)
    for i in range(3):
        e.take(i, i, _rec(i))
        e.flush()
    assert e.batches.commits == 3 and len(e.batches.took_ms) == 3
    assert all(t >= 20 for t in e.batches.took_ms)
    line = commit_summary([e.batches])
    m = re.fullmatch(r"3 transactions committed; the newest 3 took p50 ([\d.]+) ms, p99 ([\d.]+) ms", line)
    assert m is not None, line
    assert 20 <= float(m[1]) <= float(m[2])
    assert commit_summary(
        [StableEgress(FakeWriter(), PlainRecords("reading", "sensor", "json"), "t", 0, 0.1, None).batches]
    ) == ("0 transactions committed")
