"""The stable egress of one partition: each stable tuple written once, in id order, in transactions.

It takes the stream's stable tuples as hastream's readers deliver them (in id order, from
whichever replica of the node they follow) and writes each as a plain record
(``services.egress.records``). Records go in one transaction that is committed every
``commit_s``: a consumer reading ``read_committed`` sees a batch at once, never a part of one,
and never what an aborted or fenced writer sent. The newest committed id is the egress's
position (``services.egress.position``): a new primary goes on after it, so an id below it is
one already written (a replica switch or a restart reads some ids again) and is skipped.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Protocol

from services.core.errors import InputGapError
from services.core.tuples import RawHeaders
from services.egress.records import PlainRecords

COMMITS_KEPT = 4096  # how many of the newest commits' durations a writer keeps for its summary


class TransactionalWriter(Protocol):
    """What an egress uses of ``services.core.transactions.TransactionalProducer``."""

    open: bool

    def begin(self) -> None: ...

    def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int = -1, headers: RawHeaders = None
    ) -> None: ...

    def commit(self, timeout: float = 30) -> None: ...


class Batches:
    """A writer's transactions, committed at most every ``commit_s`` (from the last commit's start): a
    read_committed consumer sees a batch at once, and under a steady stream a record waits half of
    ``commit_s`` for its commit on average, ``commit_s`` at most. A record after a quiet spell is
    committed at once."""

    def __init__(self, writer: TransactionalWriter, commit_s: float) -> None:
        self.writer, self.commit_s = writer, commit_s
        self.committed = float("-inf")  # when the last commit began
        self.commits = 0
        self.took_ms: deque[float] = deque(maxlen=COMMITS_KEPT)  # how long each of the newest commits took

    def begin(self) -> None:
        """Open a transaction unless one is open."""
        if not self.writer.open:
            self.writer.begin()

    def tick(self, now: float) -> bool:
        """Commit the open transaction if the last commit began ``commit_s`` ago or more; whether it did."""
        if self.writer.open and now - self.committed >= self.commit_s:
            self.committed = now
            self._commit()
            return True
        return False

    def flush(self) -> None:
        """Commit what is open now (on a clean stop)."""
        if self.writer.open:
            self._commit()

    def _commit(self) -> None:
        """Commit, timed: a record waits for the commit it goes in, so its duration is part of the latency."""
        started = time.perf_counter()
        self.writer.commit()
        self.took_ms.append((time.perf_counter() - started) * 1e3)
        self.commits += 1


class StableEgress:
    """Partition ``partition`` of a stable egress topic, going on after ``after`` (None: from id 0)."""

    def __init__(
        self,
        writer: TransactionalWriter,
        records: PlainRecords,
        topic: str,
        partition: int,
        commit_s: float,
        after: int | None,
    ) -> None:
        self.writer, self.records = writer, records
        self.topic, self.partition = topic, partition
        self.batches = Batches(writer, commit_s)
        self.next_id = 0 if after is None else after + 1
        self.written = 0  # records sent, committed or not

    def take(self, tid: int, stime: int, rec: dict[str, Any], now: float | None = None) -> None:
        """One stable tuple of the stream; ids come in order, each at least once."""
        if tid < self.next_id:
            return  # written already: read again after a switch or a restart
        if tid > self.next_id:
            raise InputGapError(
                f"{self.topic}[{self.partition}]: stable id {tid} came after {self.next_id - 1}: "
                f"ids {self.next_id}..{tid - 1} are missing from what the stream delivered"
            )
        self.batches.begin()
        key, value, headers = self.records.record(tid, stime, rec)
        self.writer.send(self.topic, value, key, self.partition, headers)
        self.next_id += 1
        self.written += 1

    def tick(self, now: float) -> bool:
        return self.batches.tick(now)

    def flush(self) -> None:
        self.batches.flush()
