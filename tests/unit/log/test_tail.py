"""Backward scans of an output log survive a broker connection torn down mid-scan."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from services.core.tuples import STABLE, TENTATIVE, make_headers
from services.log import tail
from services.log.logged import CHUNK, stable_after


class Msg:
    def __init__(self, offset: int, headers: Any) -> None:
        self._offset, self._headers = offset, headers

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None

    def headers(self) -> Any:
        return self._headers

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def key(self) -> None:
        return None


LOG = [Msg(0, make_headers(STABLE, 0, 10)), Msg(1, make_headers(STABLE, 1, 20)), Msg(2, make_headers(TENTATIVE, 2, 30))]


class FakeConsumer:
    """One partition holding ``LOG``; ``fail`` makes the first watermark query fail as a dying broker does."""

    def __init__(self, fail: bool) -> None:
        self.fail, self.pos = fail, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        if self.fail:
            raise KafkaException(KafkaError(KafkaError._DESTROY_BROKER, "broker destroyed"))
        return 0, len(LOG)

    def assign(self, tps: list[TopicPartition]) -> None:
        self.pos = tps[0].offset

    def consume(self, n: int, timeout: float) -> list[Msg]:
        out = LOG[self.pos : self.pos + n]
        self.pos += len(out)
        return out

    def poll(self, timeout: float) -> Msg | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def close(self) -> None:
        pass


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch) -> list[FakeConsumer]:
    """Consumers handed out by the scan: the first fails, later ones work."""
    made: list[FakeConsumer] = []

    def plain_consumer(bootstrap: str, role: str, **_: Any) -> FakeConsumer:
        made.append(FakeConsumer(fail=not made))
        return made[-1]

    monkeypatch.setattr(tail, "plain_consumer", plain_consumer)
    return made


def test_offset_after_stable_retries_a_destroyed_broker(flaky: list[FakeConsumer]) -> None:
    assert tail.offset_after_stable("b", "t.r1", 0, last_stable=0) == 1
    assert len(flaky) == 2


def test_last_stable_id_retries_a_destroyed_broker(flaky: list[FakeConsumer]) -> None:
    assert tail.last_stable_id("b", "t.r1", 0) == 1
    assert len(flaky) == 2


def test_last_message_retries_a_destroyed_broker(flaky: list[FakeConsumer]) -> None:
    m = tail.last_message("b", "t.r1", 0, timeout=1)
    assert m is not None and m.offset() == 2


class LogConsumer(FakeConsumer):
    """One partition holding ``log`` (a list of headers, offset = index), never failing."""

    def __init__(self, log: list[Any]) -> None:
        super().__init__(fail=False)
        self.log = [Msg(i, h) for i, h in enumerate(log)]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.log)

    def consume(self, n: int, timeout: float) -> list[Msg]:
        out = self.log[self.pos : self.pos + n]
        self.pos += len(out)
        return out


def _zombie_log() -> list[Any]:
    """Epoch 3 writes stable 0..4; epoch 5 takes over (EPOCH) and writes stable 5..6; the replaced
    epoch-3 copy, resumed, then writes stable 5, a tentative 6 and an UNDO naming 5."""
    from services.core.tuples import EPOCH, UNDO, header_writer

    old, new = header_writer(0, epoch=3), header_writer(0, epoch=5)
    log = [old(STABLE, i, 10 * i) for i in range(5)]
    log += [new(EPOCH, -1, 0), new(STABLE, 5, 50), new(STABLE, 6, 60)]
    log += [old(STABLE, 5, 51), old(TENTATIVE, 6, 61), old(UNDO, 5, 0)]
    return log


@pytest.mark.parametrize("chunk", [3, 4, 2000])
def test_scans_leave_out_what_a_fenced_writer_wrote(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """The last stable id, the seek point after an id and the stable tuples after it are the live
    writer's, however the scan's chunks fall."""
    log = _zombie_log()
    monkeypatch.setattr(tail, "plain_consumer", lambda *a, **k: LogConsumer(log))
    assert tail.last_stable_id("b", "t.r0", 0, chunk=chunk) == 6
    assert tail.seek_after_stable("b", "t.r0", 0, 5, chunk=chunk) == (7, 5)
    assert tail.seek_after_stable("b", "t.r0", 0, 3, chunk=chunk) == (4, 3)


def test_stable_after_takes_only_the_live_writers_tuples(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _zombie_log()
    monkeypatch.setattr(tail, "plain_consumer", lambda *a, **k: LogConsumer(log))
    logged = stable_after("b", "t.r0", 0, 3)
    assert [logged[i][0] for i in (4, 5, 6)] == [40, 50, 60] and 7 not in logged and 3 not in logged


def test_a_restart_from_a_long_logs_start_holds_one_chunk_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """ha-review D10: a restart with no checkpoint checks what it regenerates against its whole log;
    the log is read as the checks reach it, never whole into memory."""
    from services.node import resume

    log = [make_headers(STABLE, i, 10 * i) for i in range(20_000)]
    monkeypatch.setattr(tail, "plain_consumer", lambda *a, **k: LogConsumer(log))
    logged = resume.stable_after("b", "t.r0", 0, -1)  # what a restart from the inputs' start reads
    most = 0
    for i in range(20_000):
        assert logged[i][0] == 10 * i
        most = max(most, len(logged))
    assert most <= 2 * CHUNK, f"held {most} of the log's 20000 stable tuples at once"
    assert 20_000 not in logged


def test_a_topic_with_only_an_epoch_marker_has_nothing_written() -> None:
    from services.core.tuples import EPOCH, header_writer

    log = [header_writer(0, epoch=5)(EPOCH, -1, 0)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tail, "plain_consumer", lambda *a, **k: LogConsumer(log))
        assert tail.last_stable_id("b", "t.r0", 0) is None


def test_a_reader_goes_on_from_the_last_stable_tuple_itself_when_a_boundary_rides_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The boundary after stable 1 rides on it: a reader that has 1 reads it again (a duplicate) to
    take the boundary; a boundary of its own after the tuple is read anyway."""
    from services.core.tuples import BOUNDARY, with_bound

    carried = [make_headers(STABLE, 0, 10), with_bound(make_headers(STABLE, 1, 20), 30)]
    apart = [make_headers(STABLE, 0, 10), make_headers(STABLE, 1, 20), make_headers(BOUNDARY, 1, 30)]
    monkeypatch.setattr(tail, "plain_consumer", lambda *a, **k: LogConsumer(carried))
    assert tail.offset_after_stable("b", "t.r0", 0, 1) == 1
    assert tail.offset_after_stable("b", "t.r0", 0, 0) == 1, "an older tuple's: right after it"
    monkeypatch.setattr(tail, "plain_consumer", lambda *a, **k: LogConsumer(apart))
    assert tail.offset_after_stable("b", "t.r0", 0, 1) == 2


def test_a_reader_keeping_tentative_tuples_goes_on_after_their_t_max_in_one_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rule 3: after the newest tentative tuple whose t_max the reader has; from after its last
    stable id if the topic holds stable tuples it lacks; a single backward scan either way."""
    from services.core.tuples import with_tmax

    def tent(tid: int, tmax: int) -> Any:
        return with_tmax(make_headers(TENTATIVE, tid, tmax), tmax)

    log = [make_headers(STABLE, 0, 10), make_headers(STABLE, 1, 20), tent(2, 30), tent(3, 40), tent(4, 50)]
    made: list[LogConsumer] = []

    def consumer(*_: Any, **__: Any) -> LogConsumer:
        made.append(LogConsumer(log))
        return made[-1]

    monkeypatch.setattr(tail, "plain_consumer", consumer)
    assert tail.seek_after_tentative("b", "t.r1", 0, last_stable=1, tmax=40) == (4, 0)
    assert tail.seek_after_tentative("b", "t.r1", 0, last_stable=1, tmax=5) == (2, 0), "holds none: after stable 1"
    assert tail.seek_after_tentative("b", "t.r1", 0, last_stable=0, tmax=40) == (1, 0), "stable 1 is lacking"
    assert len(made) == 3, "one scan per seek"
    assert tail.seek_after_tentative("b", "t.r1", 0, last_stable=-1, tmax=40) == (0, 0)


def test_a_fresh_read_starts_after_the_tentative_tuples_the_reader_has_and_scans_no_further(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rule 4: the followed replica's corrections bring the stable tuples, so the scan of the other
    replica's long tentative run stops at the newest tentative tuple the reader has."""
    from services.core.tuples import with_tmax

    def tent(tid: int, tmax: int) -> Any:
        return with_tmax(make_headers(TENTATIVE, tid, tmax), tmax)

    log = [make_headers(STABLE, 0, 10), make_headers(STABLE, 1, 20)]
    log += [tent(2 + i, 30 + 10 * i) for i in range(1000)]  # a long failure's run: t_max 30 .. 10020
    read = [0]

    class Counting(LogConsumer):
        def consume(self, n: int, timeout: float) -> list[Msg]:
            out = super().consume(n, timeout)
            read[0] += len(out)
            return out

    monkeypatch.setattr(tail, "plain_consumer", lambda *a, **k: Counting(log))
    assert tail.seek_fresh("b", "t.r1", 0, tmax=9990, chunk=10) == (999, 0), "after t_max 9990, at offset 998"
    assert read[0] <= 50, "it read the tail only"
    assert tail.seek_fresh("b", "t.r1", 0, tmax=5, chunk=10) == (2, 0), "the whole run is news: after stable 1"


def test_a_switch_to_a_replica_that_reconciled_finds_its_undo_reading_on_from_its_tentative_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from services.core.tuples import UNDO

    log = [make_headers(STABLE, 0, 10), make_headers(STABLE, 1, 20)]
    log += [make_headers(TENTATIVE, 2 + i, 30 + i) for i in range(50)]  # offsets 2..51
    log += [make_headers(UNDO, 1, 0)] + [make_headers(STABLE, 2 + i, 30 + i) for i in range(50)]  # UNDO at 52
    monkeypatch.setattr(tail, "plain_consumer", lambda *a, **k: LogConsumer(log))
    assert tail.undo_after("b", "t.r1", 0, start=40, last_stable=1) == (52, 0), "its corrections start after it"
    assert tail.undo_after("b", "t.r1", 0, start=40, last_stable=0) is None, "it names stable 1, which is lacking"
    assert tail.undo_after("b", "t.r1", 0, start=53, last_stable=1) is None, "stable tuples before any UNDO"
    assert tail.undo_after("b", "t.r1", 0, start=2, last_stable=1, limit=10) is None, "not within the limit"
