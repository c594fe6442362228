"""Restart images in chunks: read back whole, a torn write falls back to the image before it,
compaction keeps the newest complete image, and a failed write never reaches the loop."""

from __future__ import annotations

import random
from typing import Any

import pytest
from confluent_kafka import KafkaException

from services.core.pickling import dump_frames
from services.dpc.sunion import SUnionState
from services.node import restart
from services.node.restart import ImageWriter, RestartImage
from tests.unit.dpc.fake_node import CHAIN, FakeMessage, FakeNode

TOPIC, CHUNK = "t.restart.n.r0", 1000


class FakeLog:
    """One partition of a restart topic: offsets, keys and headers as the broker keeps them.

    ``compact`` does what the log cleaner does (the newest message per key stays, tombstones go;
    the active segment, here the newest message, is never cleaned). ``crash_after`` makes the
    n-th next send fail, as a process killed in the middle of a write leaves the log.
    """

    def __init__(self) -> None:
        self.msgs: list[FakeMessage] = []
        self.next = 0
        self.sends_left: int | None = None
        self.flushes, self.failing_flush = 0, 0

    @property
    def raw(self) -> FakeLog:
        return self

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int = 0, headers: Any = None):
        if self.sends_left is not None:
            if self.sends_left == 0:
                raise KafkaException("killed in the middle of the write")
            self.sends_left -= 1
        self.msgs.append(FakeMessage(topic, value, list(headers or []), self.next, partition, key))
        self.next += 1

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int, **kw: Any) -> None:
        self.send(topic, value, key, partition, kw.get("headers"))
        kw["on_delivery"](None, self.msgs[-1])

    def on_delivery(self, err: Any, msg: Any) -> None:
        """Never called: every message is delivered."""

    def flush(self, timeout: float = 30) -> None:
        self.flushes += 1
        if self.flushes == self.failing_flush:
            raise KafkaException("not acknowledged in time")

    def crash_after(self, n: int | None) -> None:
        self.sends_left = n

    def compact(self) -> None:
        newest = {m.key(): m.offset() for m in self.msgs}
        self.msgs = [
            m for m in self.msgs if m is self.msgs[-1] or (newest[m.key()] == m.offset() and m.value() is not None)
        ]

    def live_chunk_keys(self) -> set[bytes | None]:
        newest = {m.key(): m for m in self.msgs}
        return {k for k, m in newest.items() if k != restart.manifest_key(0) and m.value() is not None}

    # what restart reads through services.log.tail
    def last_message(self, bootstrap: str, topic: str, partition: int) -> FakeMessage | None:
        return self.msgs[-1] if self.msgs else None

    def messages_between(self, bootstrap: str, topic: str, partition: int, start: int, end: int) -> list:
        return [m for m in self.msgs if start <= m.offset() < end]


@pytest.fixture
def log(monkeypatch: Any) -> FakeLog:
    fake = FakeLog()
    monkeypatch.setattr(restart, "last_message", fake.last_message)
    monkeypatch.setattr(restart, "messages_between", fake.messages_between)
    return fake


def image(chunks: int, seed: int = 1) -> RestartImage:
    """An image of ``chunks`` chunks: its operator snapshot is noise, the rest under 500 bytes."""
    noise = random.Random(seed).randbytes(chunks * CHUNK - 500)
    return RestartImage(noise, SUnionState([None], {}, None, {}, [None]), {"out": (seed, -1)}, {}, {"in": seed})


def writer(log: FakeLog) -> ImageWriter:
    """A replica's writer as a (re)started process builds it: it knows nothing but the log."""
    return ImageWriter("unused:9092", TOPIC, 0, producer=log, chunk_bytes=CHUNK)


def write(w: ImageWriter, img: RestartImage) -> None:
    w.write(img)
    w.wait()


def load() -> RestartImage | None:
    return restart.load("unused:9092", TOPIC, 0)


def test_an_image_many_chunks_large_is_written_in_chunks_and_read_back_whole(log: FakeLog) -> None:
    big = image(25)
    write(writer(log), big)
    chunks = [m for m in log.msgs if m.key() != restart.manifest_key(0)]
    assert len(chunks) == 25 and all(len(m.value() or b"") <= CHUNK for m in chunks)
    assert load() == big


def test_the_newest_of_several_images_is_read(log: FakeLog) -> None:
    w = writer(log)
    for seed, size in enumerate((5, 30, 2, 7)):
        write(w, image(size, seed))
        assert load() == image(size, seed)


@pytest.mark.parametrize("sent", [0, 4, 9, 11, 12], ids=lambda n: f"killed after {n} messages")
def test_a_write_torn_anywhere_leaves_the_image_before_it(log: FakeLog, sent: int) -> None:
    """Killed while writing the third image (into the first one's slot: 9 tombstones for the
    chunks it no longer needs, its 3 chunks, then its manifest): the second image, complete,
    is read, before and after compaction, and the restarted replica writes on."""
    w = writer(log)
    write(w, image(12, 1))
    write(w, image(4, 2))
    log.crash_after(sent)
    write(w, image(3, 3))
    assert load() == image(4, 2)
    log.compact()
    assert load() == image(4, 2)
    log.crash_after(None)
    again = writer(log)  # the restarted process
    write(again, image(2, 4))
    assert load() == image(2, 4)
    log.compact()
    assert load() == image(2, 4)


def test_compaction_keeps_only_the_two_newest_images_chunks_even_after_a_torn_write(log: FakeLog) -> None:
    """Stale chunk keys are tombstoned, those a torn write left too: the topic holds the
    chunks of the two newest images, never those of the largest image ever written."""
    w = writer(log)
    write(w, image(2, 1))
    write(w, image(2, 2))
    log.crash_after(30)
    write(w, image(40, 3))  # torn after 30 chunks, into the slot whose complete image had 2
    log.crash_after(None)
    again = writer(log)  # the restarted process knows of those 30 from the log alone
    for seed in (4, 5, 6):
        write(again, image(2, seed))
    log.compact()
    assert len(log.live_chunk_keys()) == 4, "two images of 2 chunks each"
    assert load() == image(2, 6)


def test_a_failed_write_is_counted_and_the_next_one_goes_through(log: FakeLog) -> None:
    w = writer(log)
    log.crash_after(3)
    write(w, image(10, 1))  # no exception reaches the caller: the loop goes on
    assert w.failed == 1 and load() is None
    log.crash_after(None)
    write(w, image(10, 2))
    assert load() == image(10, 2)


def test_a_write_whose_manifest_landed_though_its_flush_failed_is_not_overwritten_next(log: FakeLog) -> None:
    w = writer(log)
    write(w, image(3, 1))
    log.failing_flush = log.flushes + 2  # the manifest's
    write(w, image(3, 2))
    assert w.failed == 1 and load() == image(3, 2)
    log.crash_after(2)
    write(w, image(3, 3))  # torn: it must not have gone to the slot of the image it believes failed
    assert load() == image(3, 2)


def test_an_image_still_in_flight_when_the_next_is_due_makes_the_scheme_skip_that_one() -> None:
    node = FakeNode(CHAIN, "n1")
    node.scheme.next_image = 0.0
    node.images.busy = True
    node.step([], 1.0)
    assert not node.producer.topics[node.images.topic], "no second image while one is in flight"
    node.images.busy = False
    node.scheme.next_image = 0.0
    node.step([], 2.0)
    assert len(node.producer.topics[node.images.topic]) == 1


def test_pickling_large_state_reports_progress_as_it_goes() -> None:
    """The loop pickles its state: each ~64 KiB piece gives the heartbeats a chance (``tick``)."""
    calls = []
    state = [{"sensor": f"s{i}", "ts": i, "value": float(i)} for i in range(100_000)]
    frames = dump_frames(state, lambda: calls.append(1))
    size = sum(map(len, frames))
    assert size > 2_000_000 and len(calls) >= size // (128 * 1024)
