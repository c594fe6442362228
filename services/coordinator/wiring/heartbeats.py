"""The one agent on the heartbeats topic: each heartbeat decoded once and heard by every protocol
that follows heartbeats, in a fixed order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import faust

from services.control.messages import Heartbeat
from services.coordinator.wiring.raw import decoded

if TYPE_CHECKING:
    from services.coordinator.app import Coordinator

Hear = Callable[["Coordinator", Heartbeat], Awaitable[None]]


def wire(app: faust.App, coordinator: Coordinator, hearers: Sequence[Hear]) -> None:
    """Agent ``heartbeats``: every readable heartbeat goes to each of ``hearers`` in turn."""

    @app.agent(coordinator.heartbeats, name="heartbeats")
    async def on_heartbeats(stream: Any) -> None:
        async for beat in decoded(stream, Heartbeat.decode, "a heartbeat"):
            for hear in hearers:
                await hear(coordinator, beat)
