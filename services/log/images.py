"""A chunked image store on a compacted topic: a state far larger than a Kafka message, written to
survive compaction and a crash in the middle of a write, and deltas between images.

What is stored is any pickled record with a ``chain`` and a ``seq`` (``Chained``): a restart image
(``services.node.restart``), a passive standby's checkpoints. Per partition of the topic:

- An image is written in chunks of ``CHUNK_BYTES``. Two slots alternate. Chunk i of slot s is keyed
  ``p<partition>.<s>.<i>``. A write goes to the slot the newest complete image does not use, so a
  torn write never touches it.
- A manifest (JSON, keyed ``p<partition>``) goes last, once every chunk is acknowledged. It names
  the image, its slot and its chunk count. The chunks are the messages right before it: offsets
  survive compaction, so a reader fetches exactly them, however many old images the uncompacted
  segments still hold.
- Chunk keys of the slot past the new image's count are tombstoned first.
- Every chunk and tombstone carries (header ``ht.image``) the offset of the newest complete
  manifest: a reader that finds a torn write at the end goes straight back to that image.
- Replicas that take turns writing one topic (passive standby) write with their epochs: the writer
  checks its fence (``fence``, a newer epoch has claimed the partition) before every send, so a
  replaced primary that wakes up in the middle of an image stops before its next chunk, delta or
  manifest; and a manifest names its writer's epoch, so a follower never moves back onto an older
  writer's chain. A chunk already handed to the Kafka client before the pause still goes out when
  the process wakes up (only a transactional write would fence it too): once compacted it can spoil
  the successor's image in the same slot, until the successor writes its next image to the other.
- Between images, **deltas**: what changed since the previous record of the same *chain* (one
  writer's numbered sequence). An image records the chain and number it was taken at, and every
  delta goes after it in the log (the writer thread writes images and deltas in the order they are
  taken). So the newest state is the newest complete image brought forward by the deltas that
  follow its manifest, numbered one after another from its own. A delta is keyed
  ``p<partition>.d<i>``, ``i`` counting from its image: compaction replaces it only by a delta of a
  newer image, and a reader stops at a gap anyway, with an older state that is just as consistent.

The caller pickles an image (its state must not move meanwhile; ``services.core.pickling`` lets the
heartbeat thread run while it does); an ``ImageWriter`` thread chunks and writes it, one image or
delta at a time.
"""

from __future__ import annotations

import json
import logging
import pickle
import queue
import threading
from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol, TypeVar

from confluent_kafka import KafkaError, Message

from services.core.errors import FencedError, RestartImageError
from services.core.kafka import BatchProducer, DataProducer
from services.core.pickling import dump_frames
from services.core.tuples import RawHeaders
from services.log.retention import CHUNK_BYTES
from services.log.tail import last_message, messages_after, messages_between

log = logging.getLogger(__name__)

HEADER = "ht.image"  # on chunks, tombstones and deltas: "<newest complete manifest's offset>/<slot>/<extent>"
DELTA_KEYS = 10_000  # a delta's key counts from its image up to this, then wraps


class Chained(Protocol):
    """A stored record: its writer's chain of records and its number in it."""

    chain: int
    seq: int


Image = TypeVar("Image", bound=Chained)
Delta = TypeVar("Delta", bound=Chained)


@dataclass(frozen=True)
class Manifest:
    """Names a complete image: its chunks are the ``chunks`` messages right before the manifest."""

    image: int  # counts up per partition
    slot: int
    chunks: int
    size: int  # bytes of the pickled image
    extents: tuple[int, int]  # per slot, how many chunk keys may hold a value
    chain: int = 0  # the image's chain and number (``Chained``), for a follower
    seq: int = 0
    epoch: int = 0  # its writer's epoch: a follower never takes an older writer's image after a newer one's

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, data: bytes | None, where: str) -> Manifest:
        try:
            d = json.loads(data or b"")
            extents = (d["extents"][0], d["extents"][1])
            chain, seq, epoch = d.get("chain", 0), d.get("seq", 0), d.get("epoch", 0)
            return cls(d["image"], d["slot"], d["chunks"], d["size"], extents, chain, seq, epoch)
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
    return key_prefix(partition) + b"%d.%d" % (slot, i)


def key_prefix(partition: int) -> bytes:
    """What every chunk key and delta key of ``partition`` starts with."""
    return b"p%d." % partition


def delta_key(partition: int, i: int) -> bytes:
    return key_prefix(partition) + b"d%d" % (i % DELTA_KEYS)


def delta_of(m: Message, partition: int, where: str, kind: type[Delta]) -> Delta | None:
    """The delta ``m`` holds, or None if it is no delta (a chunk, a tombstone, a manifest)."""
    key, value = m.key(), m.value()
    if value is None or not isinstance(key, bytes) or not key.startswith(key_prefix(partition) + b"d"):
        return None
    d = pickle.loads(value)
    if not isinstance(d, kind):
        raise RestartImageError(f"{where}@{m.offset()} holds a {type(d).__name__}, not a {kind.__name__}")
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


def load(
    bootstrap: str, topic: str, partition: int, image: type[Image], delta: type[Delta]
) -> tuple[Image | None, list[Delta], int, int]:
    """The newest complete image of one partition, the deltas of its chain that follow it in order,
    the offset after the last message read, and the image's writer's epoch."""
    h = head(bootstrap, topic, partition)
    if h.manifest is None:
        return None, [], 0, 0
    where = f"{topic}[{partition}]"
    msgs = messages_between(bootstrap, topic, partition, h.offset - h.manifest.chunks, h.offset)
    got = assemble(h.manifest, msgs, partition, where, image)
    after = messages_after(bootstrap, topic, partition, h.offset + 1)
    deltas: list[Delta] = []
    seq = got.seq
    for m in after:
        d = delta_of(m, partition, where, delta)
        if d is not None and d.chain == got.chain and d.seq == seq + 1:
            deltas.append(d)
            seq = d.seq
    return got, deltas, (after[-1].offset() or 0) + 1 if after else h.offset + 1, h.manifest.epoch


def assemble(man: Manifest, msgs: list[Message], partition: int, where: str, kind: type[Image]) -> Image:
    """The image from its chunks, checked against its manifest."""
    if [m.key() for m in msgs] != [chunk_key(partition, man.slot, i) for i in range(man.chunks)]:
        raise RestartImageError(f"{where}: restart image {man.image} does not have its {man.chunks} chunks")
    data = b"".join(m.value() or b"" for m in msgs)
    if len(data) != man.size:
        raise RestartImageError(f"{where}: restart image {man.image} has {len(data)} bytes, not {man.size}")
    image = pickle.loads(data)
    if not isinstance(image, kind):
        raise RestartImageError(f"{where} holds a {type(image).__name__}, not a {kind.__name__}")
    return image


_Job = tuple[str, list[bytes], int, int, int]  # ("image" | "delta", pickled frames, chain, seq, job number)


class ImageWriter:
    """Writes one partition's images and deltas from a thread, in order.

    The loop only pickles its state (``write``, ``write_delta``) and goes on: neither a large
    image nor a slow broker holds it up. A write that fails is logged and counted (``failed``);
    the next one is tried all the same. ``producer`` (for tests) must report successful deliveries.
    ``fence`` (thread-safe) raises ``FencedError`` once a newer writer has claimed the partition:
    checked before every send, it stops the writer for good (``fenced``); ``epoch`` goes into each
    manifest.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        producer: DataProducer | None = None,
        chunk_bytes: int = CHUNK_BYTES,
        on_written: Callable[[], None] = lambda: None,
        fence: Callable[[], None] = lambda: None,
    ) -> None:
        self.bootstrap, self.topic, self.partition, self.chunk_bytes = bootstrap, topic, partition, chunk_bytes
        self.on_written, self.fence = on_written, fence
        self.epoch = 0  # the writer's epoch, named in its manifests
        self.fenced: FencedError | None = None  # a newer writer took over: nothing more is written
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
        self._jobs: queue.Queue[_Job | None] = queue.Queue()  # None: stop (``close``)
        self._taken = self._done = 0  # images taken, and written or failed (each counted by one thread)
        self.queued = 0  # jobs handed over, numbered from 1
        # the last job written whose restart point a load reaches: after a delta that failed, none
        # until an image is written (the deltas after it depend on the lost one)
        self.written = 0
        self._broken = False
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """An image is still being written."""
        return self._taken > self._done

    def write(self, image: Chained, progress: Callable[[], None] = lambda: None) -> None:
        """Pickle ``image`` now, on the caller's thread (calling ``progress`` as it goes), then
        write it in the background, after what is in flight."""
        self._taken += 1
        self._put(("image", dump_frames(image, progress), image.chain, image.seq, self.queued + 1))

    def write_delta(self, data: bytes, chain: int, seq: int) -> None:
        """Write a pickled delta in the background, after what is in flight."""
        self._put(("delta", [data], chain, seq, self.queued + 1))

    def _put(self, job: _Job) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"image-{self.topic}", daemon=True)
            self._thread.start()
        self.queued = job[4]
        self._jobs.put(job)

    def wait(self) -> None:
        """Until everything taken is written or has failed."""
        self._jobs.join()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread once what is queued is written (``timeout`` at most), so neither it nor the
        producer outlives the node: a client left to the interpreter's exit can crash it there."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                self._do(*job)
            finally:
                self._jobs.task_done()

    def _do(self, kind: str, frames: list[bytes], chain: int, seq: int, number: int) -> None:
        if self.fenced is not None:
            if kind == "image":
                self._done += 1
            return
        try:
            if kind == "image":
                self._write(b"".join(frames), chain, seq)
                self._base, self._broken = (chain, seq), False
            else:
                self._write_delta(frames[0], chain, seq)
            if not self._broken:
                self.written = number
        except FencedError as e:  # a zombie: the loop stops at its next flush, for the same reason
            self.fenced = e
            log.warning("restart %s not written to %s[%d]: %s", kind, self.topic, self.partition, e)
            return
        except Exception as e:  # the loop goes on: the next image is tried at the next interval
            self.failed += 1
            self._broken = self._broken or kind == "delta"
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
        self.fence()
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
        self.fence()
        for i in range(len(chunks), stale):
            self._producer.send(self.topic, None, chunk_key(p, slot, i), p, headers)
        for i, chunk in enumerate(chunks):
            self.fence()  # a writer paused meanwhile and replaced stops before its next chunk
            self._producer.send(self.topic, chunk, chunk_key(p, slot, i), p, headers)
        self._producer.flush()
        extents = list(h.extents)
        extents[slot] = len(chunks)
        man = Manifest(h.image, slot, len(chunks), len(data), (extents[0], extents[1]), chain, seq, self.epoch)
        self.fence()
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
