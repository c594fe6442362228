"""The one agent on the heartbeats topic: each heartbeat decoded once and heard by every protocol
that follows heartbeats, in a fixed order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import faust

from services.control.messages import CLAIM_EPOCH, Heartbeat
from services.coordinator.wiring.raw import decoded

if TYPE_CHECKING:
    from services.coordinator.app import Coordinator

Hear = Callable[["Coordinator", Heartbeat], Awaitable[None]]


def wire(app: faust.App, coordinator: Coordinator, hearers: Sequence[Hear], on_claim: Hear) -> None:
    """Agent ``heartbeats``: every readable heartbeat is heard (``hear``)."""

    @app.agent(coordinator.heartbeats, name="heartbeats")
    async def on_heartbeats(stream: Any) -> None:
        async for beat in decoded(stream, Heartbeat.decode, "a heartbeat"):
            await hear(coordinator, beat, hearers, on_claim)


async def hear(coordinator: Coordinator, beat: Heartbeat, hearers: Sequence[Hear], on_claim: Hear) -> None:
    """``beat`` to each of ``hearers`` in turn; an epoch claim's (``CLAIM_EPOCH``: often the coordinator's
    own, under the name of the replica it claims for) to ``on_claim`` alone: it is no sign of that
    replica's life, process, role or reads."""
    if beat.epoch == CLAIM_EPOCH:
        await on_claim(coordinator, beat)
        return
    for h in hearers:
        await h(coordinator, beat)
