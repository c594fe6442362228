"""Replica health: every heartbeat, once the backlog is read, into the standby lags and the restart
counts (``services.coordinator.health``); a crash loop is logged once as it starts."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import faust

from services.control.messages import Heartbeat

if TYPE_CHECKING:
    from services.coordinator.app import Coordinator

log = logging.getLogger("hastream.coordinator")


def wire(app: faust.App, coordinator: Coordinator) -> None:
    """Nothing of its own: it follows the heartbeats (``heard``)."""


async def heard(coordinator: Coordinator, beat: Heartbeat) -> None:
    if coordinator.caught_up:
        warning = coordinator.health.heard(beat, time.monotonic())
        if warning is not None:
            log.warning("%s", warning)
