"""What a writer's log holds of the stable tuples a restarted writer regenerates, read as the replay
reaches them.

A restart (from a checkpoint, an ack, or the inputs' start when there is neither) checks each
stable tuple it regenerates against the one its log holds under that id, and drops it. The log
holds every id from the restart point to its tail: all of history after a restart from the
inputs' start. ``LoggedStable`` reads them forward in chunks as the checks ask for them, in
increasing order, and forgets each chunk once the checks are past it, so a restart holds one
chunk of the log in memory, never the whole log.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import TopicPartition

from services.core.retry import retry_transient
from services.log import tail

CHUNK = 2000  # stable tuples read ahead at a time
Logged = tuple[int, tuple[bytes | None, bytes | None]]  # (stime, (value, key)) of a stable tuple


class LoggedStable(Mapping[int, Logged]):
    """The stable tuples of one log with ids above ``last`` (id -> (stime, (value, key))), the live
    writers' only, read ``chunk`` ids ahead of the id looked up; ids are looked up in increasing
    order. Iterating and ``len`` see the chunk held now."""

    def __init__(self, bootstrap: str, topic: str, partition: int, last: int, chunk: int = CHUNK) -> None:
        self.chunk = chunk
        self._c = tail.range_consumer(bootstrap, "seek")
        end = self._c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        start, epoch = tail.seek_after_stable(bootstrap, topic, partition, last)
        self._records: Iterator[Any] | None = tail.stable_records(self._c, topic, partition, start, end, epoch)
        self._last = last
        self._held: dict[int, Logged] = {}
        self._ahead = last  # the highest id read

    def __getitem__(self, tid: int) -> Logged:
        held = self._held
        if tid > self._ahead:
            self._read_past(tid)
        return held[tid]

    def __iter__(self) -> Iterator[int]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def _read_past(self, tid: int) -> None:
        """Forget what is below ``tid``; read on until ``chunk`` ids past it are held, or the log's end."""
        held = self._held
        for old in [i for i in held if i < tid]:
            del held[old]
        records = self._records
        while records is not None and self._ahead < tid + self.chunk:
            got = next(records, None)
            if got is None:
                self.close()
                return
            i, stime, kv = got
            if i > self._last:
                held[i] = (stime, kv)  # a later copy of an id (a rollback's duplicate) is the one kept
                self._ahead = max(self._ahead, i)

    def close(self) -> None:
        if self._records is not None:
            self._records = None
            self._c.close()


@retry_transient
def stable_after(bootstrap: str, topic: str, partition: int, last: int) -> LoggedStable:
    """Every stable tuple with an id above ``last`` in a node's output log, read as it is looked up."""
    return LoggedStable(bootstrap, topic, partition, last)
