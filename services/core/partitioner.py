"""Which partition a key goes to: one function used by sources, nodes and the Spark stage."""
from __future__ import annotations

import zlib
from typing import Any


def key_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def partition_for(key: bytes, partitions: int) -> int:
    """CRC32 of the key bytes modulo the partition count (deterministic across processes)."""
    return zlib.crc32(key) % partitions if partitions > 1 else 0
