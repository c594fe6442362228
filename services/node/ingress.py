"""The ingress: how a node reads a raw topic that any Kafka client writes, with no ``ht`` header.

In Borealis, sources reach the query network through an ingress that owns the input
contract. Here a stream declared with ``ingress:`` is fed by a node of its own (its
``ingress_<stream>`` node, replicated like any node) whose input port reads the raw
topic ``<spec>.<stream>.raw`` and makes each record a stable tuple:

- its id is the record's offset: Kafka hands every replica the same order, so every
  replica takes the same tuples (the node's output ids are dense, as any node's);
- its time (stime) is the record's Kafka timestamp, or a field of the record;
- the input's boundary is the newest time taken minus ``lateness``, so a record older than
  that is late: it goes to the dead-letter topic with the reason. The decision depends on
  the log alone, hence is the same on every replica;
- a partition idle for ``idle`` ms gets a tick: the ingress writes a BOUNDARY into the raw
  topic itself, at the clock minus ``lateness``. Being in the log, every replica reads the
  same ticks at the same place, and time moves on while no producer writes;
- with several partitions, a record must be in the partition its key maps to (crc32 of the
  key, librdkafka's default partitioner, as ``hastream produce`` does), so that each key's
  state lives in one partition.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from confluent_kafka import Message

from services.core.codec import codec_for
from services.core.errors import HeaderError
from services.core.partitioner import key_bytes, partition_for
from services.core.tuples import BOUNDARY, Headers, make_headers, parse_headers
from services.spec.model import RECORD_TIMESTAMP
from services.spec.plan import InputPlan


def wall_ms() -> int:
    return int(time.time() * 1000)


class RawReader:
    """One partition of a raw topic as an ingress port reads it."""

    def __init__(self, plan: InputPlan, partition: int) -> None:
        ing = plan.ingress
        assert ing is not None
        self.decode: Callable[[bytes | None], Any] = (
            _json_record if ing.format == "json" else codec_for(plan.schema).decode
        )
        self.time = None if ing.time == RECORD_TIMESTAMP else ing.time
        self.lateness = ing.lateness
        self.idle_s = ing.idle_ms / 1000
        self.key = plan.key if plan.partitions > 1 else None
        self.partitions, self.partition = plan.partitions, partition
        self.topic = plan.topics[0]
        self.last_read = time.monotonic()  # when a record or tick was last read

    def read(self, m: Message) -> tuple[int, dict[str, Any] | None]:
        """(stime, record) of a raw message, or (stime, None) for a tick; raises ValueError
        (or DecodeError) saying why a record cannot be taken."""
        headers = m.headers()
        if headers:
            tick = _tick_time(headers)
            if tick is not None:
                return tick, None
        rec = self.decode(m.value())
        stime = m.timestamp()[1] if self.time is None else rec.get(self.time)
        if not isinstance(stime, int) or isinstance(stime, bool):
            raise ValueError(f"tuple time {self.time or 'timestamp'}={stime!r} is not a whole number of ms")
        if self.key is not None:
            p = partition_for(key_bytes(rec.get(self.key)), self.partitions)
            if p != self.partition:
                raise ValueError(
                    f"{self.key}={rec.get(self.key)!r} belongs in partition {p} (crc32 of the key, librdkafka's "
                    f"default partitioner), not {self.partition}: produce with the key as the message key"
                )
        return stime, rec

    def tick_due(self, now: float) -> bool:
        """Nothing was read for ``idle`` ms: time should move on without records."""
        return self.idle_s > 0 and now - self.last_read >= self.idle_s

    def tick(self) -> Headers:
        """The headers of a tick: a BOUNDARY at the clock minus ``lateness``."""
        return make_headers(BOUNDARY, -1, wall_ms() - self.lateness)


def _tick_time(headers: Any) -> int | None:
    """The time of a tick (a BOUNDARY among the raw records), else None: a record's own headers
    are the producer's business."""
    try:
        meta = parse_headers(headers)
    except HeaderError:
        return None
    return meta.stime if meta.type is BOUNDARY else None


def _json_record(value: bytes | None) -> dict[str, Any]:
    if value is None:
        raise ValueError("the record has no value")
    try:
        rec = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(rec, dict):
        raise ValueError(f"a JSON object was expected, got {type(rec).__name__}")
    return rec
