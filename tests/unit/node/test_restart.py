"""Restart images in chunks: read back whole, a torn write falls back to the image before it,
compaction keeps the newest complete image, and a failed write never reaches the loop."""

from __future__ import annotations

import copy
import pickle
import random
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicPartition

from services.core.pickling import dump_frames
from services.dpc.sunion import SUnionState
from services.ha import follower
from services.ha.follower import Follower
from services.log import images
from services.log.images import ImageWriter
from services.node import restart
from services.node.restart import RestartDelta, RestartImage
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
        return {k for k, m in newest.items() if k != images.manifest_key(0) and m.value() is not None}

    # what restart reads through services.log.tail
    def last_message(self, bootstrap: str, topic: str, partition: int) -> FakeMessage | None:
        return self.msgs[-1] if self.msgs else None

    def messages_between(self, bootstrap: str, topic: str, partition: int, start: int, end: int) -> list:
        return [m for m in self.msgs if start <= m.offset() < end]

    def messages_after(self, bootstrap: str, topic: str, partition: int, start: int) -> list:
        return [m for m in self.msgs if start <= m.offset()]

    def consumer(self, bootstrap: str, role: str, **conf: Any) -> FakeLogConsumer:
        return FakeLogConsumer(self)


class FakeLogConsumer:
    """Reads a ``FakeLog`` from where it is assigned, as a follower's consumer does."""

    def __init__(self, log: FakeLog) -> None:
        self.log, self.pos = log, 0

    def assign(self, tps: list) -> None:
        self.pos = tps[0].offset

    def consume(self, n: int, timeout: float) -> list:
        out = [m for m in self.log.msgs if m.offset() >= self.pos][:n]
        if out:
            self.pos = out[-1].offset() + 1
        return out

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return 0, self.log.next

    def close(self) -> None:
        pass


@pytest.fixture
def log(monkeypatch: Any) -> FakeLog:
    fake = FakeLog()
    monkeypatch.setattr(images, "last_message", fake.last_message)
    monkeypatch.setattr(images, "messages_between", fake.messages_between)
    monkeypatch.setattr(images, "messages_after", fake.messages_after)
    monkeypatch.setattr(follower, "messages_between", fake.messages_between)
    monkeypatch.setattr(follower, "plain_consumer", fake.consumer)
    return fake


def image(chunks: int, seed: int = 1, chain: int = 0, seq: int = 0) -> RestartImage:
    """An image of ``chunks`` chunks: its operator snapshot is noise, the rest under 500 bytes."""
    noise = random.Random(seed).randbytes(chunks * CHUNK - 500)
    sunion = SUnionState([None], {}, None, {}, [None])
    return RestartImage(noise, sunion, {"out": (seed, -1)}, {}, {"in": seed}, chain=chain, seq=seq)


def delta(chain: int, seq: int) -> RestartDelta:
    """Checkpoint ``seq`` of ``chain``: its operators' delta names it, its offset is its number."""
    return RestartDelta(
        [f"d{seq}"], SUnionState([None], {}, None, {}, [None]), {"out": (seq, -1)}, {}, {"in": seq}, 0, chain, seq
    )


def write_delta(w: ImageWriter, d: RestartDelta) -> None:
    w.write_delta(pickle.dumps(d), d.chain, d.seq)
    w.wait()


def brought_to(img: RestartImage, *deltas: RestartDelta) -> RestartImage:
    """``img`` as a reader brings it forward by ``deltas``."""
    out = copy.deepcopy(img)
    for d in deltas:
        out.advance(d)
    return out


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
    chunks = [m for m in log.msgs if m.key() != images.manifest_key(0)]
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


def test_the_deltas_after_the_newest_image_bring_it_forward_in_order_up_to_a_missing_one(log: FakeLog) -> None:
    """Deltas of another chain (a replaced writer's) and those after a gap are not applied."""
    w = writer(log)
    write(w, image(2, 1, chain=5, seq=1))
    for d in (delta(5, 2), delta(5, 3), delta(6, 4), delta(5, 4), delta(5, 6)):
        write_delta(w, d)
    assert load() == brought_to(image(2, 1, chain=5, seq=1), delta(5, 2), delta(5, 3), delta(5, 4))


def test_a_torn_image_leaves_the_image_before_it_with_every_delta_of_the_chain(log: FakeLog) -> None:
    """A delta follows from the checkpoint before it, image or not: a torn image loses nothing."""
    w = writer(log)
    write(w, image(2, 1, chain=5, seq=1))
    write_delta(w, delta(5, 2))
    log.crash_after(1)
    write(w, image(2, 2, chain=5, seq=2))
    log.crash_after(None)
    write_delta(w, delta(5, 3))
    assert w.failed == 1
    assert load() == brought_to(image(2, 1, chain=5, seq=1), delta(5, 2), delta(5, 3))


def test_compaction_keeps_the_newest_image_and_its_deltas(log: FakeLog) -> None:
    w = writer(log)
    seq = 1
    for seed in (1, 2, 3):
        write(w, image(2, seed, chain=5, seq=seq))
        for _ in range(3 if seed < 3 else 2):
            seq += 1
            write_delta(w, delta(5, seq))
        log.compact()
    deltas = [m for m in log.msgs if (m.key() or b"").startswith(b"p0.d")]
    assert len(deltas) == 3, "the newest image's two deltas and the third of the image before"
    assert load() == brought_to(image(2, 3, chain=5, seq=7), delta(5, 8), delta(5, 9))


def test_a_follower_applies_each_delta_as_it_comes_and_takes_a_new_chain_whole(log: FakeLog) -> None:
    w = writer(log)
    write(w, image(2, 1, chain=5, seq=1))
    write_delta(w, delta(5, 2))
    took: list[Any] = []
    f = Follower("unused:9092", TOPIC, 0, lambda img: took.append(("image", img.seq, img.deltas)), took.append)
    assert took == [("image", 2, [["d2"]])] and f.state is not None and f.state.offsets == {"in": 2}
    write_delta(w, delta(5, 3))
    write(w, image(2, 2, chain=5, seq=3))  # the image of the checkpoint it has: not read again
    write_delta(w, delta(5, 5))  # 4 is missing: not applied
    f.poll()
    assert took[1:] == [delta(5, 3)] and f.state.seq == 3
    write(w, image(2, 3, chain=9, seq=1))  # a new primary's first checkpoint
    write_delta(w, delta(9, 2))
    assert f.catch_up() is f.state and f.state.chain == 9 and f.state.seq == 2
    assert took[2:] == [("image", 1, []), delta(9, 2)] and f.state.snapshot == b""


def test_a_follower_takes_an_images_chunks_from_what_it_read(log: FakeLog, monkeypatch: Any) -> None:
    """Each image is read once, by the follower's own consumer: no range read (a new consumer) per
    image, except for one whose chunks it did not all see (it started mid-image)."""
    reads: list[tuple[int, int]] = []

    def counted(bootstrap: str, topic: str, partition: int, start: int, end: int) -> list:
        reads.append((start, end))
        return log.messages_between(bootstrap, topic, partition, start, end)

    monkeypatch.setattr(follower, "messages_between", counted)
    w = writer(log)
    write(w, image(2, 1, chain=5, seq=1))
    took: list[Any] = []
    f = Follower("unused:9092", TOPIC, 0, lambda img: took.append((img.chain, img.seq)), took.append)
    for seq in (1, 2, 3):
        write(w, image(3, seq, chain=7, seq=seq))
    assert f.catch_up() is not None and took == [(5, 1), (7, 1), (7, 2), (7, 3)]
    assert reads == []
    write(w, image(2, 9, chain=8, seq=1))
    f.consumer.assign([TopicPartition(TOPIC, 0, log.next - 2)])  # as if it had missed the first chunk
    f.catch_up()
    assert took[-1] == (8, 1) and len(reads) == 1


def test_pickling_large_state_reports_progress_as_it_goes() -> None:
    """The loop pickles its state: each ~64 KiB piece gives the heartbeats a chance (``tick``)."""
    calls = []
    state = [{"sensor": f"s{i}", "ts": i, "value": float(i)} for i in range(100_000)]
    frames = dump_frames(state, lambda: calls.append(1))
    size = sum(map(len, frames))
    assert size > 2_000_000 and len(calls) >= size // (128 * 1024)


def test_written_counts_the_writes_a_load_reaches_none_past_a_lost_delta_until_an_image(log: FakeLog) -> None:
    """What a passive standby reports as its restart point (ha-review D1): a write a load cannot reach
    (a delta after a lost one) is not written for it, and a torn image loses no delta before it."""
    w = writer(log)
    write(w, image(2, 1, chain=5, seq=1))
    write_delta(w, delta(5, 2))
    w.wait()
    assert (w.queued, w.written) == (2, 2)
    log.crash_after(0)
    write_delta(w, delta(5, 3))  # lost
    w.wait()
    log.crash_after(None)
    write_delta(w, delta(5, 4))  # written, but a load stops at the lost one
    w.wait()
    assert (w.queued, w.written, w.failed) == (4, 2, 1)
    write(w, image(2, 2, chain=5, seq=5))
    assert w.written == 5 and load() == image(2, 2, chain=5, seq=5)
    log.crash_after(0)
    write(w, image(2, 3, chain=5, seq=6))  # torn: the chain up to it stays whole
    log.crash_after(None)
    write_delta(w, delta(5, 7))
    w.wait()
    assert (w.queued, w.written) == (7, 7)


def test_closing_a_writer_writes_what_is_queued_then_stops_its_thread(log: FakeLog) -> None:
    """Left running, the thread holds the writer and its producer until the interpreter exits, and a
    Kafka client destroyed there can crash it (the full test run ended in a segmentation fault)."""
    w = writer(log)
    big = image(3)
    w.write(big)
    thread = w._thread
    assert thread is not None and thread.is_alive()
    w.close()
    assert not thread.is_alive() and load() == big
    w.close()  # again: nothing to stop
