"""Reading a stream as a client: decoded tuples with their headers, per partition in order.

A CEC node's footprints (``services.core.tuples.FOOTPRINTS``) are no tuples of the stream: passed over,
unless the reader asks for them (``footprints``), then each with its part, input id and epoch, its
state's size in place of the state."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, TypeVar

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

from services.cec import outlog
from services.core.codec import codec_for
from services.core.errors import DecodeError, HeaderError
from services.core.kafka import plain_consumer
from services.core.retry import retry_transient
from services.core.tuples import FOOTPRINTS, Tuple, parse_headers
from services.spec import Spec


class StreamReader:
    """Follows one replica's topic of a stream (all partitions)."""

    def __init__(
        self,
        spec: Spec,
        stream: str,
        bootstrap: str,
        replica: int = 0,
        from_beginning: bool = True,
        footprints: bool = False,
    ) -> None:
        topics = spec.readable_topics(stream)
        if replica >= len(topics):
            raise ValueError(f"stream '{stream}' has {len(topics)} replica(s); replica {replica} does not exist")
        self.stream, self.topic = stream, topics[replica]
        self.partitions = spec.streams[stream].partitions
        self.codec = codec_for(spec.streams[stream].schema)
        self.footprints = footprints
        self.consumer = plain_consumer(bootstrap, "reader", unique=True)
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        self.consumer.assign([TopicPartition(self.topic, p, start) for p in range(self.partitions)])

    @retry_transient
    def end_offsets(self) -> dict[int, int]:
        return {
            p: self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
            for p in range(self.partitions)
        }

    def poll(self, timeout: float = 0.2, max_messages: int = 500) -> list[Tuple]:
        out = []
        for m in self.consumer.consume(max_messages, timeout):
            if m.error() is not None:
                continue
            try:
                meta = parse_headers(m.headers())
                if meta.type in FOOTPRINTS:
                    if not self.footprints:
                        continue
                    value = _footprint(m.value())
                else:
                    value = self.codec.decode(m.value()) if m.value() is not None else None
            except (HeaderError, DecodeError):
                continue  # not a tuple of this stream; the services dead-letter such input
            out.append(Tuple(self.stream, m.partition() or 0, m.offset() or 0, meta, m.key(), value))
        return out

    def follow(self, idle_timeout: float | None = None) -> Iterator[Tuple]:
        """Tuples as they arrive; stops after ``idle_timeout`` seconds without any."""
        return follow_polls(self.poll, idle_timeout)

    def read_until(self, predicate, timeout: float = 60.0) -> list[Tuple]:
        """Collect tuples until ``predicate(collected)`` holds or ``timeout`` passes."""
        got: list[Tuple] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got.extend(self.poll())
            if predicate(got):
                break
        return got

    def close(self) -> None:
        self.consumer.close()


T = TypeVar("T")
FOOTPRINT = codec_for(outlog.FOOTPRINT).decode


def _footprint(value: bytes | None) -> dict[str, Any] | None:
    """A footprint's value as shown: what it is of, and how large its state is."""
    if value is None:
        return None  # CEC_CLOSE: a closed part whose result went to the dead letters
    rec = dict(FOOTPRINT(value))
    rec["state"] = len(rec["state"])
    return rec


def follow_polls(poll: Callable[[], list[T]], idle_timeout: float | None) -> Iterator[T]:
    """Items of successive ``poll()`` calls as they arrive; stops after ``idle_timeout`` seconds without any."""
    last = time.monotonic()
    while True:
        batch = poll()
        if batch:
            last = time.monotonic()
            yield from batch
        elif idle_timeout is not None and time.monotonic() - last > idle_timeout:
            return
