"""Which upstream logs the coordinator trims, and how far (ICDE 2005, section 5.2, queue trimming).

The coordinator reads every level-1 acknowledgement (``services.ha.acks``) and, every
interval, moves the start of each log whose readers all acknowledge (upstream backup nodes)
to the oldest of their current primaries' acks. A log with another reader (a node of another
scheme, an application reading a sink) is never trimmed, nor is a shared source topic, nor a
replica log (each replica's offsets differ). Kafka-free: the coordinator makes the calls.
"""

from __future__ import annotations

from typing import Callable

from services.ha.acks import Ack, Key, trim_points
from services.spec import Spec


def trimmable(spec: Spec) -> dict[str, list[str]]:
    """Topic -> the nodes reading it, for every log that only upstream backup nodes read."""
    out: dict[str, list[str]] = {}
    for s, sd in spec.streams.items():
        readers = [n for n in spec.nodes if s in spec.node_inputs(n)]
        topics = spec.stream_topics(s)
        if not readers or len(topics) != 1 or sd.topic is not None:
            continue
        if all(spec.nodes[n].ha.scheme.kind.trims_inputs for n in readers):
            out[topics[0]] = readers
    return out


class Trims:
    """The acks heard so far and how far each log was trimmed."""

    def __init__(self, spec: Spec) -> None:
        self.readers = trimmable(spec)
        self.partitions = {t: spec.streams[s].partitions for s in spec.streams for t in spec.stream_topics(s)}
        self.acks: dict[tuple[str, int, int], Ack] = {}  # (node, partition, epoch) -> that primary's newest ack
        self.starts: dict[Key, int] = {}  # (topic, partition) -> the log start the last trim gave
        self.trims = 0

    def heard(self, ack: Ack) -> None:
        key = (ack.node, ack.partition, ack.epoch)
        had = self.acks.get(key)
        if had is None or ack.taken_ms >= had.taken_ms:
            self.acks[key] = ack

    def due(self, epoch: Callable[[str, int], int]) -> dict[Key, int]:
        """(topic, partition) -> offset, for each log that may now start later than it does."""
        points = trim_points(self.readers, self.partitions, self.acks, epoch)
        return {k: off for k, off in points.items() if off > self.starts.get(k, 0)}

    def trimmed(self, key: Key, start: int) -> None:
        self.starts[key] = max(start, self.starts.get(key, 0))
        self.trims += 1

    def table(self) -> dict[str, int]:
        """Each trimmed log's start, for the status page."""
        return {f"{t}[{p}]": off for (t, p), off in sorted(self.starts.items())}
