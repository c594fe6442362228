"""Each protocol the coordinator speaks, wired to its faust app by a module of its own.

A module here has ``wire(app, coordinator)``, which makes its agents, timers and pages; one that
follows heartbeats also has ``heard(coordinator, beat)``, called by the one heartbeats agent for
every heartbeat. A new protocol adds its module and its names below; ``app.py`` stays as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import faust

from services.coordinator.wiring import grants, health, heartbeats, pages, takeovers, trims

if TYPE_CHECKING:
    from services.coordinator.app import Coordinator

# Each heartbeat is heard in this order: the takeovers hear the coordinator's own first heartbeat
# before it marks the backlog read.
HEARERS: tuple[heartbeats.Hear, ...] = (takeovers.heard, grants.heard, trims.heard, health.heard)
WIRES = (grants.wire, takeovers.wire, trims.wire, health.wire, pages.wire)


def wire(app: faust.App, coordinator: Coordinator) -> None:
    """Every protocol's agents, timers and pages, the heartbeats agent first."""
    heartbeats.wire(app, coordinator, HEARERS, takeovers.heard_claim)
    for wire_protocol in WIRES:
        wire_protocol(app, coordinator)
