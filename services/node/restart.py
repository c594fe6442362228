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

The loop pickles the image (its state must not move meanwhile; ``services.core.pickling``
lets the heartbeat thread run while it does); an ``ImageWriter`` thread chunks and writes
it, one image at a time.
"""

from __future__ import annotations

import json
import logging
import pickle
import threading
from dataclasses import asdict, dataclass, field
from typing import Callable

from confluent_kafka import KafkaError, Message

from services.core.errors import RestartImageError
from services.core.kafka import BatchProducer, DataProducer
from services.core.pickling import dump_frames
from services.core.tuples import RawHeaders
from services.dpc.sunion import SUnionState
from services.log.tail import last_message, messages_between

log = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024  # far below the broker's and the consumers' limits on one message
TOPIC_CONFIG = {
    "max.message.bytes": str(4 * CHUNK_BYTES),  # one chunk with its key and headers, compressed or not
    "cleanup.policy": "compact",  # the newest image per partition stays, however old
    "segment.ms": str(60_000),  # only closed segments are compacted: roll them often
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": str(60_000),
}
HEADER = "ht.image"  # on chunks and tombstones: "<newest complete manifest's offset>/<slot>/<extent>"


@dataclass
class RestartImage:
    snapshot: bytes  # NodePipeline.snapshot(): every operator's state
    sunion: SUnionState
    outputs: dict[str, tuple[int, int]]  # stream -> SOutput.state(): next stable id, last boundary sent
    ports: dict[str, tuple[int, int]]  # input stream -> (replica read, last stable id)
    offsets: dict[str, int] = field(default_factory=dict)  # input topic -> next offset
    taken_ms: int = 0
    failed: bool = False  # taken during an upstream failure: ``snapshot`` is the state before it


@dataclass(frozen=True)
class Manifest:
    """Names a complete image: its chunks are the ``chunks`` messages right before the manifest."""

    image: int  # counts up per partition
    slot: int
    chunks: int
    size: int  # bytes of the pickled image
    extents: tuple[int, int]  # per slot, how many chunk keys may hold a value

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, data: bytes | None, where: str) -> Manifest:
        try:
            d = json.loads(data or b"")
            return cls(d["image"], d["slot"], d["chunks"], d["size"], (d["extents"][0], d["extents"][1]))
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


def manifest_key(partition: int) -> bytes:
    return b"p%d" % partition


def chunk_key(partition: int, slot: int, i: int) -> bytes:
    return b"p%d.%d.%d" % (partition, slot, i)


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
    """The newest complete restart image of one node replica partition, or None."""
    h = head(bootstrap, topic, partition)
    if h.manifest is None:
        return None
    msgs = messages_between(bootstrap, topic, partition, h.offset - h.manifest.chunks, h.offset)
    return _assemble(h.manifest, msgs, partition, f"{topic}[{partition}]")


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


class ImageWriter:
    """Writes one node replica partition's restart images from a thread, one image at a time.

    The loop only pickles its state (``write``) and goes on: neither a large image nor a slow
    broker holds it up. A write that fails is logged, and the next image is tried at the
    next interval. ``producer`` (for tests) must report successful deliveries.
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
            **{"batch.num.messages": 1, "message.max.bytes": 2 * chunk_bytes, "delivery.report.only.error": False},
        )
        self._head: Head | None = None  # read from the topic before the first write
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """An image is still being written."""
        return self._thread is not None and self._thread.is_alive()

    def write(self, image: RestartImage, progress: Callable[[], None] = lambda: None) -> None:
        """Pickle ``image`` now, on the caller's thread (calling ``progress`` as it goes), then
        write it in the background, after the image still in flight if any."""
        frames = dump_frames(image, progress)
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(frames,), name=f"image-{self.topic}", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the image in flight is written or has failed."""
        if self._thread is not None:
            self._thread.join()

    def _run(self, frames: list[bytes]) -> None:
        try:
            self._write(b"".join(frames))
        except Exception as e:  # the loop goes on: the next image is tried at the next interval
            self.failed += 1
            self._head = None  # read again: the manifest may have landed though its flush failed
            log.warning("restart image not written to %s[%d]: %s", self.topic, self.partition, e)
            return
        self.on_written()

    def _write(self, data: bytes) -> None:
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
        man = Manifest(h.image, slot, len(chunks), len(data), (extents[0], extents[1]))
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
