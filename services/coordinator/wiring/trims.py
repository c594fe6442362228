"""Upstream backup: hear the level-1 acks and the writers' restart points (heartbeats); every
interval, trim each log its readers all acked (``services.coordinator.trims`` decides how far)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import faust

from services.control.messages import Heartbeat
from services.coordinator.trims import Point
from services.coordinator.wiring.raw import decoded, raw_topic
from services.core.errors import DecodeError
from services.ha.acks import Ack, Key
from services.log.trim import trim_before, trim_limit

if TYPE_CHECKING:
    from services.coordinator.app import Coordinator


def wire(app: faust.App, coordinator: Coordinator) -> None:
    """Agent ``acks`` and timer ``trims``, if some log is read by upstream backup nodes only."""
    if not coordinator.trims.readers:
        return
    spec = coordinator.spec
    every = min(nd.ha.interval_ms for nd in spec.nodes.values() if nd.ha.scheme.kind.trims_inputs)
    acks = raw_topic(app, spec.acks_topic)

    @app.agent(acks, name="acks")
    async def on_acks(stream: Any) -> None:
        async for ack in decoded(stream, Ack.decode, "an ack", unreadable=(DecodeError,)):
            coordinator.trims.heard(ack)

    @app.timer(interval=every / 1000, name="trims")
    async def trims() -> None:
        await trim(coordinator)


async def heard(coordinator: Coordinator, beat: Heartbeat) -> None:
    """A writer's replica reports what of its log its takeover reads back."""
    if coordinator.trims.readers:
        coordinator.trims.reported(beat)


async def trim(coordinator: Coordinator) -> None:
    """Move the start of each log that may start later now (DeleteRecords, off the event loop)."""
    if not (coordinator.ready() and coordinator.caught_up):
        return
    takeovers = coordinator.takeovers
    for key, point in coordinator.trims.due(takeovers.epoch, takeovers.role).items():
        offset = await _limited(coordinator, key, point)
        if offset > coordinator.trims.starts.get(key, 0):
            start = await asyncio.get_running_loop().run_in_executor(
                None, trim_before, coordinator.bootstrap, key[0], key[1], offset
            )
            coordinator.trims.trimmed(key, start)


async def _limited(coordinator: Coordinator, key: Key, point: Point) -> int:
    """Where the log may start: its readers' point, never past its writer's needs (read again when due)."""
    trims, now = coordinator.trims, time.monotonic()
    offset = trims.limited(key, point, now)
    if offset is None:
        loop = asyncio.get_running_loop()
        limit = await loop.run_in_executor(None, trim_limit, coordinator.bootstrap, key[0], key[1], point.keep)
        offset = trims.read_limit(key, point, limit, now)
    return offset
