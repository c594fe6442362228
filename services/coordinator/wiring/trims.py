"""Upstream backup: hear the level-1 acks; every interval, trim each log its readers all acked
(``services.coordinator.trims`` decides how far)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import faust

from services.coordinator.wiring.raw import decoded, raw_topic
from services.core.errors import DecodeError
from services.ha.acks import Ack
from services.log.trim import trim_before

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


async def trim(coordinator: Coordinator) -> None:
    """Move the start of each log that may start later now (DeleteRecords, off the event loop)."""
    if not (coordinator.ready() and coordinator.caught_up):
        return
    loop = asyncio.get_running_loop()
    for (topic, p), offset in coordinator.trims.due(coordinator.takeovers.epoch).items():
        start = await loop.run_in_executor(None, trim_before, coordinator.bootstrap, topic, p, offset)
        coordinator.trims.trimmed((topic, p), start)
