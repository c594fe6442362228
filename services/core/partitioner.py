"""Which partition a key goes to: one function used by sources, nodes and the Spark stage."""

from __future__ import annotations

import zlib
from typing import Any, Callable


def key_bytes(value: Any) -> bytes:
    """A key's bytes: a string's UTF-8 (the common case first), bytes as they are, else ``str``'s."""
    if isinstance(value, str):
        return value.encode()
    return value if isinstance(value, bytes) else str(value).encode()


def partition_for(key: bytes, partitions: int) -> int:
    """CRC32 of the key bytes modulo the partition count (deterministic across processes)."""
    return zlib.crc32(key) % partitions if partitions > 1 else 0


def key_encoder(avro_type: Any) -> Callable[[Any], bytes]:
    """The fastest way to turn values of a key field of this Avro type into key bytes."""
    return str.encode if avro_type == "string" else key_bytes
