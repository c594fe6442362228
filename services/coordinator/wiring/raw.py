"""Raw Avro bytes on faust topics: the coordinator decodes them with the project's codecs, not faust's.

A record that cannot be read is logged and skipped, so one bad record never stops an agent.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import TypeVar

import faust
from faust.types import TopicT

from services.core.errors import DecodeError

log = logging.getLogger("hastream.coordinator")

T = TypeVar("T")

UNREADABLE: tuple[type[Exception], ...] = (DecodeError, ValueError)


def raw_topic(app: faust.App, name: str) -> TopicT:
    """Topic ``name`` with bytes keys and values, as the nodes write them."""
    return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")


async def decoded(
    stream: AsyncIterable[bytes],
    decode: Callable[[bytes], T],
    what: str,
    unreadable: tuple[type[Exception], ...] = UNREADABLE,
) -> AsyncIterator[T]:
    """Each value of an agent's ``stream`` decoded; one that ``decode`` cannot read (``what``, e.g.
    "a heartbeat") is logged and skipped."""
    async for value in stream:
        try:
            item = decode(value)
        except unreadable as e:
            log.warning("skipping %s that cannot be read: %s", what, e)
            continue
        yield item
