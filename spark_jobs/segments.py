"""The versioned state of a Spark window: immutable Parquet segments in the replica's checkpoint folder.

Every flush of a Spark window writes the tuples it buffered since the last one as a new
segment and never changes it afterwards. A version of the state is a tuple of segments, so
taking a snapshot (checkpoint/redo, a restart image) costs a list of names, and going back
to one (a reconciliation's rollback, a restart) is using that list again: the segments
written since are simply no longer read. The folder may be on shared storage: a replica
restarted on another host continues from the restart image it finds in Kafka, whose
segments are there.

A segment's file is deleted once neither the live state nor any of the last ``keep``
snapshots handed out reads it, so the restart image being written, and the pre-failure
state a reconciliation returns to, keep theirs.
"""

from __future__ import annotations

import os
import secrets
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SUFFIX = ".parquet"


@dataclass(frozen=True)
class Segment:
    """One immutable file of window input, with what decides which windows it still feeds."""

    name: str  # file name in the store's folder
    rows: int
    min_t: int  # smallest tuple time in it
    max_end: int  # latest window end one of its tuples feeds


class SegmentStore:
    """The segments of one window replica partition: written once, read by Spark, deleted when unused."""

    def __init__(self, folder: Path, schema: pa.Schema, keep: int = 8) -> None:
        self.folder = folder
        self.schema = schema
        self.pinned: deque[frozenset[str]] = deque(maxlen=keep)
        self._token = secrets.token_hex(4)  # another incarnation never overwrites this one's files
        self._seq = 0
        folder.mkdir(parents=True, exist_ok=True)

    def write(self, columns: dict[str, list[Any]], min_t: int, max_end: int) -> Segment:
        """A new segment holding ``columns`` (the store's schema), written atomically."""
        table = pa.table(columns, schema=self.schema)
        self._seq += 1
        name = f"{self._seq:09d}-{self._token}{SUFFIX}"
        tmp = self.folder / f".{name}.tmp"
        pq.write_table(table, tmp, compression="snappy")
        os.replace(tmp, self.folder / name)
        return Segment(name, table.num_rows, min_t, max_end)

    def paths(self, segments: tuple[Segment, ...]) -> list[str]:
        return [str(self.folder / s.name) for s in segments]

    def pin(self, segments: tuple[Segment, ...]) -> None:
        """A snapshot reading ``segments`` was handed out: keep their files."""
        self.pinned.append(frozenset(s.name for s in segments))

    def missing(self, segments: tuple[Segment, ...]) -> list[str]:
        """Files of ``segments`` that are not in the folder (a state restored elsewhere)."""
        return [s.name for s in segments if not (self.folder / s.name).is_file()]

    def collect(self, live: tuple[Segment, ...]) -> int:
        """Delete every file neither ``live`` nor a pinned snapshot reads; how many were deleted."""
        keep = {s.name for s in live}.union(*self.pinned)
        gone = 0
        for f in self.folder.iterdir():
            if f.name not in keep and (f.name.endswith(SUFFIX) or f.name.endswith(".tmp")):
                f.unlink(missing_ok=True)
                gone += 1
        return gone

    def size_bytes(self) -> int:
        """Bytes the folder's segments take (the state size a benchmark reports)."""
        return sum(f.stat().st_size for f in self.folder.iterdir() if f.name.endswith(SUFFIX))
