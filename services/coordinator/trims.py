"""Which upstream logs the coordinator trims, and how far (ICDE 2005, section 5.2, queue trimming).

Every interval the coordinator moves the start of each log whose readers all say what of it
they still need to the oldest of those: an upstream backup node by its current primary's level-1
acknowledgements (``services.ha.acks``), a passive or active standby node by its replicas'
heartbeats (``needs``: the newest written checkpoint's offsets; the acknowledgement a joining
secondary rebuilds from; where an active standby secondary reads). A log with another reader (a
node of amnesia or DPC, an application reading a sink, an egress) is never trimmed, nor is a shared source topic, nor a
replica log (each replica's offsets differ), nor the output of a DPC node (its restart images
are not reported).

A log is also its writer's: its tail says where a writer that takes over or restarts goes on
(the next id, the last boundary, a source writer's epoch), and a passive standby, upstream
backup or active standby writer checks what its takeover regenerates against the log from its
restart point (the newest written checkpoint, the newest published ack, what a secondary holds).
So a trim never passes the writer's restart point, which its replicas report in their
heartbeats (``keeps``: the oldest id a takeover by that replica reads back), nor the log's last
record with a boundary (``services.log.trim.trim_limit``). A writer whose current primary has not
reported yet is not trimmed. Kafka-free: the coordinator makes the calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from services.control.messages import Heartbeat
from services.control.states import Role
from services.ha.acks import Ack, Key
from services.spec import Spec
from services.spec.exchanges import exchange_of, output_name

LIMIT_EVERY_S = 1.0  # a log's limit (the writer's restart point, its tail) is read again this often at most


def trimmable(spec: Spec) -> dict[str, list[str]]:
    """Topic -> the nodes reading it, for every log whose readers all say what of it they still need."""
    out: dict[str, list[str]] = {}
    for s, sd in spec.streams.items():
        readers = [n for n in spec.nodes if s in spec.node_inputs(n)]
        topics = spec.stream_topics(s)
        ex = exchange_of(spec, s)  # across an exchange, one log per producer partition: each is trimmed
        if not readers or len(topics) != (ex.producers if ex else 1) or sd.topic is not None or sd.egress:
            continue  # an egress reads it as an application does: what it still needs is not reported
        writer = spec.node_producing(s)
        if writer is not None and not writer.ha.scheme.kind.takeovers:
            continue
        if all(spec.nodes[n].ha.scheme.kind.trims_inputs for n in readers):
            out.update(dict.fromkeys(topics, readers))
    return out


@dataclass(frozen=True)
class Writer:
    """Who writes a log: a node and its output stream; across an exchange, one producer partition,
    whose partition i of the log is its connection to consumer partition i."""

    node: str
    stream: str
    producer: int | None = None

    def at(self, partition: int) -> tuple[int, str]:
        """The writer's node partition, and the output its heartbeats' ``keeps`` name, for ``partition`` of the log."""
        if self.producer is None:
            return partition, self.stream
        return self.producer, output_name(self.stream, partition)


def writers(spec: Spec, topics: list[str]) -> dict[str, Writer]:
    """Topic -> its writer, for each of ``topics`` a takeover reads back."""
    out = {}
    for s in spec.streams:
        node = spec.node_producing(s)
        ex = exchange_of(spec, s)
        for i, t in enumerate(spec.stream_topics(s)):
            if t in topics and node is not None and node.ha.scheme.kind.reads_own_log:
                out[t] = Writer(node.name, s, i if ex is not None else None)
    return out


@dataclass(frozen=True)
class Point:
    """Where a log may start by its readers' acks (``offset``), and the oldest id its writer reads
    back (``keep``; None: only the tail)."""

    offset: int
    keep: int | None


Role_ = Callable[[str, int, int], Role | None]


class Trims:
    """The acks and restart points heard so far, and how far each log was trimmed."""

    def __init__(self, spec: Spec) -> None:
        self.readers = trimmable(spec)
        self.writers = writers(spec, list(self.readers))
        self.replicas = {n: nd.replicas for n, nd in spec.nodes.items()}
        self.needs_by = {n: nd.ha.scheme.kind.input_needs for n, nd in spec.nodes.items()}
        self.partitions = {t: spec.topic_partitions(s) for s in spec.streams for t in spec.stream_topics(s)}
        self.acks: dict[tuple[str, int, int], Ack] = {}  # (node, partition, epoch) -> that primary's newest ack
        self.beats: dict[tuple[str, int, int], Heartbeat] = {}  # (node, partition, replica) -> its newest heartbeat
        self.starts: dict[Key, int] = {}  # (topic, partition) -> the log start the last trim gave
        self.limits: dict[Key, tuple[int | None, int, float]] = {}  # -> (keep, limit, when read) last read
        self.trims = 0

    def heard(self, ack: Ack) -> None:
        key = (ack.node, ack.partition, ack.epoch)
        had = self.acks.get(key)
        if had is None or ack.taken_ms >= had.taken_ms:
            self.acks[key] = ack

    def reported(self, beat: Heartbeat) -> None:
        """A heartbeat: a writer's replica says what of its log its takeover reads back."""
        key = (beat.node, beat.partition, beat.replica)
        had = self.beats.get(key)
        if beat.node in self.replicas and (had is None or beat.sent_ms >= had.sent_ms):
            self.beats[key] = beat

    def due(self, epoch: Callable[[str, int], int], role: Role_) -> dict[Key, Point]:
        """(topic, partition) -> where it may start by its readers, for each log that may start later
        than it does and whose writer has said what it reads back."""
        out = {}
        for topic, nodes in self.readers.items():
            for p in range(self.partitions[topic]):
                needs = [self._need(n, p, topic, epoch, role) for n in nodes]
                if not needs or any(off is None for off in needs):
                    continue  # a reader that has not said what it needs keeps everything
                key, off = (topic, p), min(n for n in needs if n is not None)
                if off <= self.starts.get(key, 0):
                    continue
                keep = self._keep(key, epoch, role)
                if keep != 0:
                    out[key] = Point(off, keep)
        return out

    def _need(self, node: str, p: int, topic: str, epoch: Callable[[str, int], int], role: Role_) -> int | None:
        """The oldest offset of ``topic`` a recovery of reader ``node`` partition ``p`` reads again: its
        current primary's newest ack (upstream backup), or what its replicas' heartbeats say."""
        if self.needs_by[node] == "acks":
            a = self.acks.get((node, p, epoch(node, p)))
            return None if a is None else a.input_offsets.get(topic)
        return self._reported(node, p, lambda beat: beat.needs.get(topic), epoch, role)

    def _keep(self, key: Key, epoch: Callable[[str, int], int], role: Role_) -> int | None:
        """The oldest id of ``key``'s log a takeover of its writer reads back (None: only its tail; 0,
        everything: its primary has not said)."""
        topic, p = key
        if topic not in self.writers:
            return None
        w = self.writers[topic]
        part, stream = w.at(p)
        got = self._reported(w.node, part, lambda beat: beat.keeps.get(stream), epoch, role)
        return 0 if got is None else got

    def _reported(
        self, node: str, p: int, value: Callable[[Heartbeat], int | None], epoch: Callable[[str, int], int], role: Role_
    ) -> int | None:
        """The least ``value`` the heartbeats of node partition (``node``, ``p``) report: its current
        primary's and its live secondaries'; None if its current primary reports none."""
        cur, lows, primary = epoch(node, p), [], False
        for r in range(self.replicas[node]):
            beat = self.beats.get((node, p, r))
            got = None if beat is None else value(beat)
            if beat is None or got is None:
                continue
            if beat.role == Role.PRIMARY.value and beat.epoch == cur:
                primary = True
            elif not (beat.role == Role.SECONDARY.value and role(node, p, r) is Role.SECONDARY):
                continue  # a replaced primary's, or a replica that is not a live secondary now
            lows.append(got)
        return min(lows) if primary else None

    def limited(self, key: Key, point: Point, now: float) -> int | None:
        """Where ``key``'s log may start, from the limit last read for it; None: read it again first.
        A limit read for an older restart point still holds (the tail only moves on); one read for
        a newer point than ``point.keep`` (a secondary that joined holds older ids) does not."""
        had = self.limits.get(key)
        if had is None or not _at_or_before(had[0], point.keep):
            return None
        if point.offset <= had[1] or now - had[2] < LIMIT_EVERY_S:
            return min(point.offset, had[1])
        return None

    def read_limit(self, key: Key, point: Point, limit: int, now: float) -> int:
        """The limit read for ``key`` (``trim_limit``); returns where its log may start."""
        self.limits[key] = (point.keep, limit, now)
        return min(point.offset, limit)

    def trimmed(self, key: Key, start: int) -> None:
        self.starts[key] = max(start, self.starts.get(key, 0))
        self.trims += 1

    def table(self) -> dict[str, int]:
        """Each trimmed log's start, for the status page."""
        return {f"{t}[{p}]": off for (t, p), off in sorted(self.starts.items())}


def _at_or_before(a: int | None, b: int | None) -> bool:
    """Whether restart point ``a`` is at or before ``b`` (None: the tail, after every id)."""
    return b is None or (a is not None and a <= b)
