"""Upstream backup's acknowledgements and queue trimming (ICDE 2005, section 5.2), Kafka-free.

An upstream log keeps each tuple until no downstream node could need it to rebuild its state.
The paper's two acknowledgements map onto Kafka as follows:

- *level-0* ("received"): the broker's acknowledgement of the node's output (``acks=all``,
  the loop's flush waits for it). From then on every downstream node can read the tuple
  even if the node that wrote it fails, which is what the paper's level-0 from downstream
  guaranteed for an output queue kept in the node's memory.
- *level-1* (``Ack``): per input, the oldest input tuple the node's state still needs, taken
  at a *cut*: right after the operators were advanced to a bucket start (``HaScheme`` moves
  them to bucket starts only, and a replay stops at the cut's, so the cut splits the output at
  the same place in both). The state at the cut
  holds input from the operators' stream markers on (``NodePipeline.oldest_time``, the
  paper's indicators of the oldest tuple in state), so replaying each input from its acked
  tuple onto an empty node rebuilds it, and every result after the cut comes out again,
  exactly: what the replay emits before its own cut is wrong (windows missing their start)
  or already written, and is dropped. The ack also says which output ids follow the cut;
  it is published once the output before the cut is written (level-0).

The upstream log may then start at the oldest level-1 ack over all the nodes that read it
(``services.coordinator.trims``), taken only from each node's current primary (its coordinator
epoch): a paused old primary that wakes up must not move a log start past what its successor
reads. A log some reader does not say what it needs of (an application) is never trimmed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from services.core.codec import codec_for

_ACK = codec_for("ack")


@dataclass(frozen=True)
class Ack:
    """A level-1 acknowledgement of one node partition (see the module docstring)."""

    node: str
    partition: int
    epoch: int
    cut: int  # operator time (a bucket start) right after which the state is what ``input_ids`` rebuild
    input_ids: dict[str, int]  # input stream -> id of the oldest input tuple the state needs
    # input topic -> an offset at or before that tuple, for an input with one log (a source, or a
    # one-log scheme's output): where that log may start. Replica logs are found by id and never trimmed.
    input_offsets: dict[str, int]
    outputs: dict[str, int]  # output stream -> id of its first tuple after the cut
    taken_ms: int = 0
    # input stream -> the boundary read before the position read from: a rebuild does not read it again
    input_bounds: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> bytes:
        """One key per primary (its epoch too): compaction keeps each primary's newest ack, so a
        paused old primary's late ack never replaces its successor's."""
        return f"{self.node}/p{self.partition}/e{self.epoch}".encode()

    def encode(self) -> bytes:
        return _ACK.encode(
            {
                "node": self.node,
                "partition": self.partition,
                "epoch": self.epoch,
                "cut": self.cut,
                "input_ids": self.input_ids,
                "input_offsets": self.input_offsets,
                "outputs": self.outputs,
                "taken_ms": self.taken_ms,
                "input_bounds": self.input_bounds,
            }
        )

    @classmethod
    def decode(cls, payload: bytes) -> Ack:
        """Raises DecodeError when ``payload`` is not an ack."""
        a = _ACK.decode(payload)
        return cls(
            a["node"],
            a["partition"],
            a["epoch"],
            a["cut"],
            dict(a["input_ids"]),
            dict(a["input_offsets"]),
            dict(a["outputs"]),
            a["taken_ms"],
            dict(a["input_bounds"]),
        )

    def restamped(self, epoch: int, taken_ms: int) -> Ack:
        """The same cut, acknowledged by a new primary that resumes from it."""
        return replace(self, epoch=epoch, taken_ms=taken_ms)


@dataclass
class _Input:
    """One input's bookkeeping: what each bucket processed, and where its ids are in the log."""

    last_read: int  # id of the last tuple read (the first needed - 1 before any)
    buckets: deque[tuple[int, int]] = field(default_factory=deque)  # (bucket start, smallest id processed in it)
    # After a poll: (last id read, next offset, the input's boundary then, None if none yet)
    reads: deque[tuple[int, int, int | None]] = field(default_factory=deque)


class Needs:
    """What of each input a node's state still needs: the level-1 acknowledgement it may send.

    Fed by the scheme: where each input starts (``start``), what each poll read (``read``), what
    each bucket processes (``processed``, before it runs); ``cut`` then names, per input, the
    oldest tuple still needed and an offset at or before it. Inputs are by stream; ids are the
    inputs' own stable ids. No order of ids by tuple time is assumed: a tuple is needed if it
    is in the operators' state (its bucket is at or after their stream marker), waits in
    SUnion, or is not read yet.
    """

    def __init__(self, bucket: int) -> None:
        self.bucket = bucket
        self.inputs: dict[str, _Input] = {}

    def start(self, stream: str, first_id: int, offset: int, bound: int | None = None) -> None:
        """``stream`` is read from ``offset``, where no tuple with an id below ``first_id`` is needed
        and the input has promised ``bound``."""
        self.inputs[stream] = _Input(first_id - 1, deque(), deque([(first_id - 1, offset, bound)]))

    def read(self, stream: str, last_id: int, next_offset: int, bound: int | None) -> None:
        """A poll read ``stream`` up to stable id ``last_id`` and boundary ``bound``; its next offset is ``next_offset``.
        A poll of boundaries alone moves the last poll's place on: the same tuples read, further in the
        log (an input that stops after a boundary is then acknowledged up to its end)."""
        inp = self.inputs[stream]
        if last_id > inp.last_read:
            inp.last_read = last_id
            inp.reads.append((last_id, next_offset, bound))
        elif inp.reads and inp.reads[-1][0] == last_id and next_offset > inp.reads[-1][1]:
            inp.reads[-1] = (last_id, next_offset, bound)

    def processed(self, stream: str, start: int, first_id: int) -> None:
        """The operators take ids from ``first_id`` on of ``stream`` in the bucket starting at ``start``."""
        b = self.inputs[stream].buckets
        if b and b[-1][0] == start:
            if first_id < b[-1][1]:
                b[-1] = (start, first_id)
        else:
            b.append((start, first_id))

    def cut(self, oldest: int | None, now: int, held: Mapping[str, int]) -> Needed:
        """At operator time ``now`` (a bucket start), with the operators' stream marker ``oldest``
        (None: no state) and ``held`` (stream -> smallest id waiting in SUnion): per input, the id
        of the oldest tuple still needed, an offset at or before it and the boundary read before
        that offset. Forgets what no later cut can need: the marker never goes back to a bucket
        before one a cut saw."""
        since = (now if oldest is None else min(oldest, now)) // self.bucket * self.bucket
        out = Needed({}, {}, {})
        for stream, inp in self.inputs.items():
            b = inp.buckets
            while b and b[0][0] < since:
                b.popleft()
            need = min((first for _, first in b), default=inp.last_read + 1)
            need = min(need, held.get(stream, need), inp.last_read + 1)
            out.ids[stream] = need
            _, out.offsets[stream], bound = _read_before(inp.reads, need)
            if bound is not None:
                out.bounds[stream] = bound
        return out


@dataclass
class Needed:
    """A cut's level-1 acknowledgement, per input stream: the id of the oldest tuple needed, an offset at
    or before it, and the boundary read before that offset (absent if none)."""

    ids: dict[str, int]
    offsets: dict[str, int]
    bounds: dict[str, int]


def _read_before(reads: deque[tuple[int, int, int | None]], need: int) -> tuple[int, int, int | None]:
    """The last poll that had not read id ``need`` yet (the ones before it are dropped)."""
    while len(reads) > 1 and reads[1][0] < need:
        reads.popleft()
    return reads[0]


def newest_usable(acks: Iterable[Ack], written: Mapping[str, int | None]) -> Ack | None:
    """The ack a takeover resumes from: of the newest epoch, the latest whose output before its cut
    the logs hold (``written``: stream -> last stable id in the log from its live writers). A
    paused old primary may have acked output it wrote after being fenced, which readers drop."""

    def held(a: Ack) -> bool:
        for s, nxt in a.outputs.items():
            last = written.get(s)
            if nxt - 1 > (-1 if last is None else last):
                return False
        return True

    usable = [a for a in acks if held(a)]
    return max(usable, key=lambda a: (a.epoch, a.taken_ms, a.cut), default=None)


Key = tuple[str, int]  # (topic, partition)
