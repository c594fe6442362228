"""Ex-Prod's routing (Flux §4.1): each result to the connection of its consumer partition.

A producer partition writes one connection per consumer partition (``services.spec.exchanges``);
a result goes to the one of CRC32 of its key field's bytes modulo the consumer's partitions, the
function sources use (``services.core.partitioner``), so a key's results meet in one consumer
partition whichever producer partition made them. A batch keeps its order within each
connection: a connection carries its results in the stime order the producer made them.
"""

from __future__ import annotations

import zlib
from typing import Callable

from services.core.partitioner import key_bytes
from services.operators.base import Emit, Item


def router(key: str | None, connections: list[list[Item]]) -> Emit:
    """An ``Emit`` that appends each result to ``connections[crc32(key) % len]``; all to the one
    connection when there is a single consumer partition (``key`` may then be None)."""
    if len(connections) == 1:
        return connections[0].extend
    if key is None:
        raise ValueError(f"routing to {len(connections)} partitions needs a key field")
    n, crc = len(connections), zlib.crc32

    def emit(items: list[Item]) -> None:
        for it in items:
            connections[crc(key_bytes(it[0][key])) % n].append(it)

    return emit


def checked(emit: Emit, key: str, partitions: int, partition: int, reject: Callable[[Item, str], None]) -> Emit:
    """Ex-Cons's check of a connection: ``emit`` gets the results that belong to consumer partition
    ``partition``; one that does not (routed by another function, or written by something that is
    not its producer) goes to ``reject`` with why, in the same place on every replica."""
    crc = zlib.crc32

    def admit(items: list[Item]) -> None:
        good = [it for it in items if crc(key_bytes(it[0][key])) % partitions == partition]
        if len(good) < len(items):
            for it in items:
                p = crc(key_bytes(it[0][key])) % partitions
                if p != partition:
                    reject(
                        it,
                        f"routed to partition {partition}, but CRC32 of its {key!r} picks partition {p} of {partitions}",
                    )
        emit(good)

    return admit
