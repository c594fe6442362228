"""Restart images: what a node replica persists to continue after a crash without losing or duplicating output.

A replica periodically writes a ``RestartImage`` to its own restart topic
(``<spec>.restart.<node>.r<k>``, partition = the node's partition, compacted so that the
newest image per partition is kept, however old): the snapshot of its operators, its
SUnion's state, its SOutputs' next ids, which upstream replica each input reads and the
input offsets that state reflects. Outputs are flushed before, so everything the state
produced is already in the output topics. During an upstream failure the image holds the
state from before the failure and SUnion's kept buckets, so a restart goes on being in
that failure and reconciles it. A restart loads the newest image, seeks the inputs back to
its offsets and replays; SOutput checks and drops the replayed stable tuples that are
already in the output topic.

An image may be far larger than a Kafka message, so it is written in chunks of
``CHUNK_BYTES``, laid out to survive compaction and a crash in the middle of a write:

- Two slots alternate. Chunk i of slot s is keyed ``p<partition>.<s>.<i>``. A write goes to
  the slot the newest complete image does not use, so a torn write never touches it.
- A manifest (JSON, keyed ``p<partition>``) goes last, once every chunk is acknowledged. It
  names the image, its slot and its chunk count. The chunks are the messages right before
  it: offsets survive compaction, so a reader fetches exactly them, however many old
  images the uncompacted segments still hold.
- Chunk keys of the slot past the new image's count are tombstoned first.
- Every chunk and tombstone carries (header ``ht.image``) the offset of the newest complete
  manifest: a reader that finds a torn write at the end goes straight back to that image.

Between images, a scheme may write **deltas** (``RestartDelta``, passive standby's checkpoints):
what the operators changed since the previous checkpoint of the same *chain* (one writer's
numbered sequence of checkpoints), with the rest of the state whole. An image records the chain
and number of the checkpoint it was taken at, and every delta goes after it in the log (the
writer thread writes images and deltas in the order they are taken). So the newest state is the
newest complete image brought forward by the deltas that follow its manifest, numbered one after
another from its own. A delta is keyed ``p<partition>.d<i>``, ``i`` counting from its image:
compaction replaces it only by a delta of a newer image, and a reader stops at a gap anyway, with
an older state that is just as consistent.

The loop pickles the image (its state must not move meanwhile; ``services.core.pickling``
lets the heartbeat thread run while it does); an ``ImageWriter`` thread chunks and writes
it, one image or delta at a time. A ``Follower`` reads them as they come (a warm standby).
"""

from __future__ import annotations

import json
import logging
import pickle
import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from confluent_kafka import KafkaError, Message, TopicPartition

from services.core.errors import RestartImageError
from services.core.kafka import BatchProducer, DataProducer, plain_consumer
from services.core.pickling import dump_frames
from services.core.tuples import RawHeaders
from services.dpc.sunion import SUnionState
from services.log.tail import last_message, messages_after, messages_between

log = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024  # far below the broker's and the consumers' limits on one message
TOPIC_CONFIG = {
    "max.message.bytes": str(4 * CHUNK_BYTES),  # one chunk with its key and headers, compressed or not
    "cleanup.policy": "compact",  # the newest image per partition stays, however old
    "segment.ms": str(60_000),  # only closed segments are compacted: roll them often
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": str(60_000),
}
HEADER = "ht.image"  # on chunks, tombstones and deltas: "<newest complete manifest's offset>/<slot>/<extent>"
DELTA_KEYS = 10_000  # a delta's key counts from its image up to this, then wraps


@dataclass
class RestartImage:
    snapshot: bytes  # NodePipeline.snapshot(): every operator's state
    sunion: SUnionState
    outputs: dict[str, tuple[int, int]]  # stream -> SOutput.state(): next stable id, last boundary sent
    ports: dict[str, tuple[int, int]]  # input stream -> (replica read, last stable id)
    offsets: dict[str, int] = field(default_factory=dict)  # input topic -> next offset
    taken_ms: int = 0
    failed: bool = False  # taken during an upstream failure: ``snapshot`` is the state before it
    chain: int = 0  # the writer's sequence of checkpoints it belongs to (0: no deltas follow it)
    seq: int = 0  # its number in that sequence
    deltas: list[list[object]] = field(default_factory=list)  # operator deltas read after it, to apply in order

    def advance(self, delta: RestartDelta) -> None:
        """Bring the image forward by the next delta of its chain."""
        self.deltas.append(delta.operators)
        self.sunion, self.outputs, self.ports, self.offsets = delta.sunion, delta.outputs, delta.ports, delta.offsets
        self.taken_ms, self.seq = delta.taken_ms, delta.seq


@dataclass
class RestartDelta:
    """A checkpoint between images: the operators' changes since checkpoint ``seq - 1`` of ``chain``
    (``NodePipeline.delta``), the rest whole (it is small), consistent with ``offsets`` and with
    outputs already delivered, as an image is."""

    operators: list[object]
    sunion: SUnionState
    outputs: dict[str, tuple[int, int]]
    ports: dict[str, tuple[int, int]]
    offsets: dict[str, int]
    taken_ms: int
    chain: int
    seq: int


@dataclass(frozen=True)
class Manifest:
    """Names a complete image: its chunks are the ``chunks`` messages right before the manifest."""

    image: int  # counts up per partition
    slot: int
    chunks: int
    size: int  # bytes of the pickled image
    extents: tuple[int, int]  # per slot, how many chunk keys may hold a value
    chain: int = 0  # the image's checkpoint chain and number (``RestartImage``), for a follower
    seq: int = 0

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, data: bytes | None, where: str) -> Manifest:
        try:
            d = json.loads(data or b"")
            extents = (d["extents"][0], d["extents"][1])
            return cls(d["image"], d["slot"], d["chunks"], d["size"], extents, d.get("chain", 0), d.get("seq", 0))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise RestartImageError(f"{where} holds no restart image manifest where one should be: {e}") from None


@dataclass
class Head:
    """Where a partition's images stand: the newest complete one (manifest and its offset), and
    per slot how many chunk keys may hold a value, which the next write into it tombstones
    past its own count (a torn write may have left more than the manifest says)."""

    manifest: Manifest | None = None
    offset: int = -1
    extents: list[int] = field(default_factory=lambda: [0, 0])

    @property
    def slot(self) -> int:
        """The slot the next image goes to: never the newest complete image's."""
        return 0 if self.manifest is None else 1 - self.manifest.slot

    @property
    def image(self) -> int:
        """The next image's number."""
        return 0 if self.manifest is None else self.manifest.image + 1


def client_id(topic: str) -> str:
    """The Kafka client id of the writer of ``topic``'s images: its bandwidth can be seen in the broker's
    metrics and capped with a client quota, apart from the node's data."""
    return f"hastream.images.{topic}"


def manifest_key(partition: int) -> bytes:
    return b"p%d" % partition


def chunk_key(partition: int, slot: int, i: int) -> bytes:
    return b"p%d.%d.%d" % (partition, slot, i)


def delta_key(partition: int, i: int) -> bytes:
    return b"p%d.d%d" % (partition, i % DELTA_KEYS)


def _delta(m: Message, partition: int, where: str) -> RestartDelta | None:
    """The delta ``m`` holds, or None if it is no delta (a chunk, a tombstone, a manifest)."""
    key, value = m.key(), m.value()
    if value is None or not isinstance(key, bytes) or not key.startswith(b"p%d.d" % partition):
        return None
    d = pickle.loads(value)
    if not isinstance(d, RestartDelta):
        raise RestartImageError(f"{where}@{m.offset()} holds a {type(d).__name__}, not a restart delta")
    return d


def head(bootstrap: str, topic: str, partition: int) -> Head:
    """Where the images of one partition stand, from its newest message (and the manifest it names)."""
    where = f"{topic}[{partition}]"
    m = last_message(bootstrap, topic, partition)
    if m is None:
        return Head()
    if m.key() == manifest_key(partition):
        man = Manifest.decode(m.value(), where)
        return Head(man, m.offset() or 0, list(man.extents))
    after, slot, extent = _torn(m, where)  # a write that did not finish: back to the image before it
    h = Head() if after < 0 else _manifest_at(bootstrap, topic, partition, after)
    h.extents[slot] = max(h.extents[slot], extent)
    return h


def _torn(m: Message, where: str) -> tuple[int, int, int]:
    """The ``HEADER`` of a chunk or tombstone: (manifest offset, slot, extent)."""
    value = dict(m.headers() or []).get(HEADER)
    fields = value.split(b"/") if isinstance(value, bytes) else []
    try:
        after, slot, extent = (int(x) for x in fields)
    except ValueError:
        raise RestartImageError(f"{where} ends with a message that is no part of a restart image") from None
    return after, slot, extent


def _manifest_at(bootstrap: str, topic: str, partition: int, offset: int) -> Head:
    where = f"{topic}[{partition}]@{offset}"
    msgs = messages_between(bootstrap, topic, partition, offset, offset + 1)
    if not msgs or msgs[0].key() != manifest_key(partition):
        raise RestartImageError(f"{where}: the restart image manifest a later write names is missing")
    man = Manifest.decode(msgs[0].value(), where)
    return Head(man, offset, list(man.extents))


def load(bootstrap: str, topic: str, partition: int) -> RestartImage | None:
    """The newest complete restart image of one node replica partition, with the deltas of its chain
    that follow it (``RestartImage.deltas``), or None."""
    return _load(bootstrap, topic, partition)[0]


def _load(bootstrap: str, topic: str, partition: int) -> tuple[RestartImage | None, int]:
    """The newest state (``load``) and the offset after the last message read."""
    h = head(bootstrap, topic, partition)
    if h.manifest is None:
        return None, 0
    where = f"{topic}[{partition}]"
    msgs = messages_between(bootstrap, topic, partition, h.offset - h.manifest.chunks, h.offset)
    image = _assemble(h.manifest, msgs, partition, where)
    after = messages_after(bootstrap, topic, partition, h.offset + 1)
    for m in after:
        d = _delta(m, partition, where)
        if d is not None and d.chain == image.chain and d.seq == image.seq + 1:
            image.advance(d)
    return image, (after[-1].offset() or 0) + 1 if after else h.offset + 1


def _assemble(man: Manifest, msgs: list[Message], partition: int, where: str) -> RestartImage:
    """The image from its chunks, checked against its manifest."""
    if [m.key() for m in msgs] != [chunk_key(partition, man.slot, i) for i in range(man.chunks)]:
        raise RestartImageError(f"{where}: restart image {man.image} does not have its {man.chunks} chunks")
    data = b"".join(m.value() or b"" for m in msgs)
    if len(data) != man.size:
        raise RestartImageError(f"{where}: restart image {man.image} has {len(data)} bytes, not {man.size}")
    image = pickle.loads(data)
    if not isinstance(image, RestartImage):
        raise RestartImageError(f"{where} holds a {type(image).__name__}, not a restart image")
    return image


_Job = tuple[str, list[bytes], int, int]  # ("image" | "delta", pickled frames, chain, seq)


class ImageWriter:
    """Writes one node replica partition's restart images and deltas from a thread, in order.

    The loop only pickles its state (``write``, ``write_delta``) and goes on: neither a large
    image nor a slow broker holds it up. A write that fails is logged and counted (``failed``);
    the next one is tried all the same. ``producer`` (for tests) must report successful deliveries.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        producer: DataProducer | None = None,
        chunk_bytes: int = CHUNK_BYTES,
        on_written: Callable[[], None] = lambda: None,
    ) -> None:
        self.bootstrap, self.topic, self.partition, self.chunk_bytes = bootstrap, topic, partition, chunk_bytes
        self.on_written = on_written
        self.failed = 0
        self.last_bytes = 0  # size of the last image written
        self._producer = producer or BatchProducer(
            bootstrap,
            linger_ms=0,
            **{
                "batch.num.messages": 1,
                "message.max.bytes": 2 * chunk_bytes,
                "delivery.report.only.error": False,
                "client.id": client_id(topic),
            },
        )
        self._head: Head | None = None  # read from the topic before the first write
        self._base = (0, 0)  # chain and number of the last image written: deltas' keys count from it
        self._jobs: queue.Queue[_Job] = queue.Queue()
        self._taken = self._done = 0  # images taken, and written or failed (each counted by one thread)
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """An image is still being written."""
        return self._taken > self._done

    def write(self, image: RestartImage, progress: Callable[[], None] = lambda: None) -> None:
        """Pickle ``image`` now, on the caller's thread (calling ``progress`` as it goes), then
        write it in the background, after what is in flight."""
        self._taken += 1
        self._put(("image", dump_frames(image, progress), image.chain, image.seq))

    def write_delta(self, data: bytes, chain: int, seq: int) -> None:
        """Write a pickled ``RestartDelta`` in the background, after what is in flight."""
        self._put(("delta", [data], chain, seq))

    def _put(self, job: _Job) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"image-{self.topic}", daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def wait(self) -> None:
        """Until everything taken is written or has failed."""
        self._jobs.join()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                self._do(*job)
            finally:
                self._jobs.task_done()

    def _do(self, kind: str, frames: list[bytes], chain: int, seq: int) -> None:
        try:
            if kind == "image":
                self._write(b"".join(frames), chain, seq)
                self._base = (chain, seq)
            else:
                self._write_delta(frames[0], chain, seq)
        except Exception as e:  # the loop goes on: the next image is tried at the next interval
            self.failed += 1
            self._head = None  # read again: the manifest may have landed though its flush failed
            log.warning("restart %s not written to %s[%d]: %s", kind, self.topic, self.partition, e)
            return
        finally:
            if kind == "image":
                self._done += 1
        if kind == "image":
            self.on_written()

    def _write_delta(self, data: bytes, chain: int, seq: int) -> None:
        """One delta, keyed by its number counted from its image, and acknowledged before the next job."""
        if self._head is None:
            self._head = head(self.bootstrap, self.topic, self.partition)
        h = self._head
        index = seq - self._base[1] if self._base[0] == chain else seq
        headers: RawHeaders = [(HEADER, b"%d/%d/%d" % (h.offset, h.slot, h.extents[h.slot]))]
        self._producer.send(self.topic, data, delta_key(self.partition, index), self.partition, headers)
        self._producer.flush()

    def _write(self, data: bytes, chain: int, seq: int) -> None:
        """Tombstones, chunks, and once they are all acknowledged the manifest."""
        if self._head is None:
            self._head = head(self.bootstrap, self.topic, self.partition)
        h, p = self._head, self.partition
        slot, size = h.slot, self.chunk_bytes
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        stale, h.extents[slot] = h.extents[slot], max(h.extents[slot], len(chunks))  # what a failure may leave
        headers: RawHeaders = [(HEADER, b"%d/%d/%d" % (h.offset, slot, h.extents[slot]))]
        for i in range(len(chunks), stale):
            self._producer.send(self.topic, None, chunk_key(p, slot, i), p, headers)
        for i, chunk in enumerate(chunks):
            self._producer.send(self.topic, chunk, chunk_key(p, slot, i), p, headers)
        self._producer.flush()
        extents = list(h.extents)
        extents[slot] = len(chunks)
        man = Manifest(h.image, slot, len(chunks), len(data), (extents[0], extents[1]), chain, seq)
        self._head = Head(man, self._send_manifest(man), extents)
        self.last_bytes = len(data)

    def _send_manifest(self, man: Manifest) -> int:
        """Write the manifest and wait for it; returns its offset."""
        offsets: list[int] = []

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                offsets.append(msg.offset() or 0)
            else:
                self._producer.on_delivery(err, msg)

        self._producer.raw.produce(
            self.topic, man.encode(), manifest_key(self.partition), self.partition, on_delivery=delivered
        )
        self._producer.flush()
        return offsets[0]


class Follower:
    """Follows one partition's checkpoints as they are written, so that a standby holds the newest
    state before it is needed (passive standby's warm standby).

    It starts from the newest image and its deltas (``load``), then reads on: each delta that is the
    next of its chain goes to ``on_delta``; an image it must take whole (at the start, when the
    chain changes after a takeover, or after a missing delta) goes to ``on_image`` with its deltas.
    ``state`` holds the rest of the newest checkpoint (SUnion, outputs, offsets), not the operators.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        on_image: Callable[[RestartImage], None],
        on_delta: Callable[[RestartDelta], None],
    ) -> None:
        self.bootstrap, self.topic, self.partition = bootstrap, topic, partition
        self.where = f"{topic}[{partition}]"
        self.on_image, self.on_delta = on_image, on_delta
        state, start = _load(bootstrap, topic, partition)
        self.state: RestartImage | None = None
        if state is not None:
            self._took(state)
        self.consumer = plain_consumer(bootstrap, "standby", unique=True, **{"fetch.wait.max.ms": 10})
        self.consumer.assign([TopicPartition(topic, partition, start)])
        self.next = start  # the offset after the last message read

    def poll(self, timeout: float = 0.0) -> int:
        """Take what has been written since the last call; returns how many messages were read."""
        msgs = self.consumer.consume(500, timeout)
        for m in msgs:
            if m.error() is None:
                self.next = (m.offset() or 0) + 1
                self._take(m)
        return len(msgs)

    def catch_up(self, timeout: float = 10) -> RestartImage | None:
        """Take everything written up to now; returns the newest checkpoint's state."""
        _, high = self.consumer.get_watermark_offsets(TopicPartition(self.topic, self.partition), timeout=timeout)
        deadline = time.monotonic() + timeout
        while self.next < high:
            self.poll(0.01)  # consume() waits its whole timeout unless its count of messages comes
            if time.monotonic() > deadline:
                raise RestartImageError(f"{self.where}: checkpoints up to offset {high} not read in {timeout}s")
        return self.state

    def close(self) -> None:
        self.consumer.close()

    def _take(self, m: Message) -> None:
        st = self.state
        if m.key() == manifest_key(self.partition):
            man = Manifest.decode(m.value(), self.where)
            if st is None or man.chain != st.chain or man.seq > st.seq:  # not the state it holds already
                off = m.offset() or 0
                chunks = messages_between(self.bootstrap, self.topic, self.partition, off - man.chunks, off)
                self._took(_assemble(man, chunks, self.partition, self.where))
            return
        d = _delta(m, self.partition, self.where)
        if d is not None and st is not None and d.chain == st.chain and d.seq == st.seq + 1:
            st.advance(d)
            st.deltas.clear()
            self.on_delta(d)

    def _took(self, image: RestartImage) -> None:
        self.on_image(image)
        image.snapshot, image.deltas = b"", []  # applied: only the rest is kept
        self.state = image
