"""Writing to an input stream, as a source does: key partitioning, dense ids, tuple time."""
from __future__ import annotations

import random
import time
from typing import Any, Iterator

from services.core.codec import codec_for
from services.core.kafka import BatchProducer, next_tuple_id
from services.core.partitioner import key_bytes, partition_for
from services.core.spec import Spec
from services.core.tuples import TupleType, make_headers


class SourceWriter:
    """Produces records of one source stream with ``ht.*`` headers.

    ``ht.id`` is dense per partition and continues across writer restarts; ``ht.stime``
    is the record's ``ts`` field (event time), or the wall clock if it has none.
    """

    def __init__(self, spec: Spec, stream: str, bootstrap: str, linger_ms: int = 5) -> None:
        if stream not in spec.sources():
            raise ValueError(f"'{stream}' is not an input stream of the spec (inputs: {', '.join(spec.sources())})")
        sd = spec.streams[stream]
        self.topic, self.partitions, self.key = spec.topic(stream), sd.partitions, sd.key
        self.codec = codec_for(sd.schema)
        self.producer = BatchProducer(bootstrap, linger_ms=linger_ms)
        self.next_id = [next_tuple_id(bootstrap, self.topic, p) for p in range(self.partitions)]
        self.sent = 0

    def send(self, rec: dict[str, Any], ttype: TupleType = TupleType.STABLE) -> None:
        key = key_bytes(rec[self.key]) if self.key else None
        p = partition_for(key, self.partitions) if key is not None else self.sent % self.partitions
        stime = rec.get("ts")
        if stime is None:
            stime = int(time.time() * 1000)
        tid = self.next_id[p]
        self.next_id[p] = tid + 1
        self.producer.send(self.topic, self.codec.encode(rec), key, p, make_headers(ttype, tid, stime))
        self.sent += 1
        if self.sent % 10000 == 0:
            self.producer.poll(0)

    def flush(self) -> None:
        self.producer.flush()


def readings(
    n: int | None = None, sensors: int = 10, start_ms: int = 1_700_000_000_000, step_ms: int = 10, seed: int = 7
) -> Iterator[dict[str, Any]]:
    """The demo/benchmark workload: sensors reporting temperatures, event time advancing by ``step_ms``.

    Values are whole numbers (as doubles) so sums are exact in any order.
    """
    rng = random.Random(seed)
    level = {f"s{i}": float(rng.randint(10, 40)) for i in range(sensors)}
    names = list(level)
    i = 0
    while n is None or i < n:
        s = names[i % sensors] if sensors <= 1 else rng.choice(names)
        level[s] = float(min(120, max(-20, level[s] + rng.randint(-3, 3))))
        yield {"sensor": s, "ts": start_ms + i * step_ms, "value": level[s], "seq": i}
        i += 1
