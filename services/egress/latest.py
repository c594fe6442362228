"""The latest egress of one partition: the newest version of each result, for a consumer that materializes it.

A compacted topic keyed by each result's identity (a window's key and start; for other
operators, the tuple id) holds, per identity, the newest record written: a tentative value as
it comes during a failure, then the stable value that corrects it. A consumer that keeps the
newest record per key (a Connect upsert sink, a ksqlDB TABLE, a dict) holds answers while a
failure lasts and the failure-free answers once it heals.

What a reader's view voids (an UNDO, a switch to a replica that corrects) stays shown until the
corrections come: a correction with the same identity overwrites it, and one the corrections do
not give back is withdrawn by a tombstone once the stream's boundary has passed its tuple time
(no stable tuple before that time can come any more). Upserts are idempotent, so a new primary
goes on after the newest committed stable id and writes the tentative results it reads again.
"""

from __future__ import annotations

from typing import Any, Callable

from services.client.partition import ViewEvent
from services.egress.records import PlainHeaders, PlainRecords
from services.egress.stable import Batches, TransactionalWriter
from services.spec.model import Spec

KIND_HEADER = "hastream.kind"  # "stable" or "tentative": how final a record's value is

Identity = Callable[[int, dict[str, Any]], bytes]


def identity_for(spec: Spec, stream: str) -> Identity:
    """How a result of ``stream`` is told from others: a window's (key, window start), else its id."""
    op = spec.producer_of(stream)
    if op is not None and op.type == "window":
        return lambda tid, rec: b"%s@%d" % (str(rec["key"]).encode(), rec["window_start"])
    return lambda tid, rec: b"%d" % tid


class LatestEgress:
    """Partition ``partition`` of a latest egress topic."""

    def __init__(
        self,
        writer: TransactionalWriter,
        records: PlainRecords,
        identity: Identity,
        topic: str,
        partition: int,
        commit_s: float,
    ) -> None:
        self.writer, self.records, self.identity = writer, records, identity
        self.topic, self.partition = topic, partition
        self.batches = Batches(writer, commit_s)
        self.shown: dict[bytes, tuple[int, int, int]] = {}  # tentative identity -> (replica, id, stime)
        self.void: dict[bytes, int] = {}  # identity shown tentatively and voided -> its stime
        self.tombstones = 0

    def event(self, ev: ViewEvent, now: float | None = None) -> None:
        """One event of the partition's view (``services.client.partition``)."""
        if ev.kind == "stable" and ev.record is not None:
            key = self.identity(ev.id, ev.record)
            self.shown.pop(key, None)
            self.void.pop(key, None)
            self._send(key, ev, b"stable", now)
        elif ev.kind == "tentative" and ev.record is not None:
            key = self.identity(ev.id, ev.record)
            self.shown[key] = (ev.replica, ev.id, ev.stime)
            self.void.pop(key, None)
            self._send(key, ev, b"tentative", now)
        elif ev.kind == "undo":
            gone = [k for k, (r, tid, _) in self.shown.items() if r == ev.replica and tid > ev.id]
            for k in gone:
                self.void[k] = self.shown.pop(k)[2]

    def passed(self, boundary: int | None, now: float | None = None) -> None:
        """The stream's stable boundary is ``boundary``: withdraw what was voided before it and not corrected."""
        if boundary is None or not self.void:
            return
        gone = [k for k, stime in self.void.items() if stime < boundary]
        for k in gone:
            del self.void[k]
            self.batches.begin()
            withdrawn: PlainHeaders = [(KIND_HEADER, b"withdrawn")]
            self.writer.send(self.topic, None, k, self.partition, withdrawn)
        self.tombstones += len(gone)

    def tick(self, now: float) -> bool:
        return self.batches.tick(now)

    def flush(self) -> None:
        self.batches.flush()

    def _send(self, key: bytes, ev: ViewEvent, kind: bytes, now: float | None) -> None:
        assert ev.record is not None
        self.batches.begin()
        _, value, headers = self.records.record(ev.id, ev.stime, ev.record)
        headers.append((KIND_HEADER, kind))
        self.writer.send(self.topic, value, key, self.partition, headers)
