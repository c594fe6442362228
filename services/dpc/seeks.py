"""Where a move of a reader (``services.dpc.switching``) starts in another replica's log.

Each seek scans the new topic's tail back (``services.log.tail``) with a consumer of its own, so
it runs on a helper thread (``SEEKS``): meanwhile the reader goes on reading the replica it
follows, and the move applies once the offset is known. ``Standby`` is rule 4's start in a
partner, sought ahead of need.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.log.tail import seek_after_stable, seek_after_tentative, seek_fresh, undo_after

if TYPE_CHECKING:
    from services.dpc.switching import Move, ReplicaReader

# Where the seeks of moves run (a scan of the new topic's tail with a consumer of its own).
SEEKS: Executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="replica-seek")


@dataclass
class Pending:
    """A move waiting for its seek: where it starts in the new topic, and the writer epoch there."""

    move: Move
    replica: int
    seek: Future[tuple[int, int] | None]  # None: the move cannot be made after all


@dataclass
class Standby:
    """Rule 4's start in a partner replica, sought ahead of need (``ReplicaReader.prepare_fresh``)."""

    replica: int
    at: float  # when the newest seek began
    seek: Future[tuple[int, int]]  # the newest seek
    ready: tuple[int, int] | None = None  # the result of the one before it

    def known(self) -> tuple[int, int] | None:
        """The newest start found so far."""
        if self.seek.done() and self.seek.exception() is None:
            return self.seek.result()
        return self.ready


def seek(reader: ReplicaReader, bootstrap: str, topic: str, last_stable: int, tmax: int | None) -> tuple[int, int]:
    """Where to start in ``topic``: after the tentative tuples up to ``tmax`` held (rule 3), else
    after stable tuple ``last_stable``; and the writer epoch there."""
    if tmax is not None:
        return seek_after_tentative(bootstrap, topic, reader.partition, last_stable, tmax)
    return seek_after_stable(bootstrap, topic, reader.partition, last_stable)


def seek_stable_from(
    reader: ReplicaReader, bootstrap: str, topic: str, last_stable: int, start: int
) -> tuple[int, int]:
    """``seek`` for a replica that reconciled after the reader last knew its tentative run at
    ``start``: right after its UNDO there, else (something else came first) by the usual scan."""
    found = undo_after(bootstrap, topic, reader.partition, start, last_stable)
    if found is None:
        return seek_after_stable(bootstrap, topic, reader.partition, last_stable)
    return found[0] + 1, found[1]


def seek_fresh_start(reader: ReplicaReader, bootstrap: str, topic: str, skip: int | None) -> tuple[int, int]:
    """Where rule 4's read of ``topic`` starts: after the tentative tuples up to t_max ``skip``
    (the reader has them; its stable tuples come from the followed replica), and the epoch there."""
    if skip is None:  # it holds none: the replica's whole tentative run is news
        return seek_after_stable(bootstrap, topic, reader.partition, reader.last_stable)
    return seek_fresh(bootstrap, topic, reader.partition, skip)
