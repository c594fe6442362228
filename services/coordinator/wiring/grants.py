"""DPC's staggered reconciliation: heartbeats into the replica table, REQUEST and DONE on the
control topic answered with GRANTs, and the tick that sends the coordinator's own heartbeat,
marks silent replicas FAILED, expires leases and grants what waits (``services.dpc.consistency``
decides)."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import faust

from services.control.messages import (
    COORDINATOR,
    ControlMessage,
    Done,
    Heartbeat,
    Request,
    decode_control,
    encode_control,
    now_ms,
)
from services.control.messages import Grant as GrantMessage
from services.control.states import NodeState
from services.coordinator.wiring.raw import decoded
from services.dpc.consistency import Grant

if TYPE_CHECKING:
    from services.coordinator.app import Coordinator

log = logging.getLogger("hastream.coordinator")


def wire(app: faust.App, coordinator: Coordinator) -> None:
    """Agent ``control`` and timer ``tick``."""

    @app.agent(coordinator.control, name="control")
    async def on_control(stream: Any) -> None:
        async for msg in decoded(stream, decode_control, "a control message"):
            await on_control_message(coordinator, msg)

    @app.timer(interval=coordinator.interval_s, name="tick")
    async def tick() -> None:
        await on_tick(coordinator)


async def heard(coordinator: Coordinator, beat: Heartbeat) -> None:
    """A replica's heartbeat goes into the table; the coordinator's own tells when the backlog is read."""
    if beat.node == COORDINATOR:
        _own_heartbeat(coordinator, beat)
        return
    coordinator.logic.on_heartbeat(beat.as_dict(), now_ms(), fresh=coordinator.caught_up)


def _own_heartbeat(coordinator: Coordinator, beat: Heartbeat) -> None:
    if not coordinator.caught_up and beat.pid == os.getpid() and beat.epoch == coordinator.started_ms:
        # Our own first heartbeat came back: everything queued before it is read.
        coordinator.caught_up = True
        coordinator.logic.caught_up(now_ms())
        log.info(
            "coordinator ready: heartbeat backlog read; %d replicas, %d reconciliation entries",
            len(list(coordinator.replicas.keys())),
            len(list(coordinator.recon.keys())),
        )


async def on_control_message(coordinator: Coordinator, msg: ControlMessage) -> None:
    """A REQUEST or DONE may free a turn: send the GRANTs it gives."""
    if not isinstance(msg, (Request, Done)):
        return  # our own, or between the replicas of a node
    fields = msg.as_dict()  # the log line's stagger: a DONE has none, and its dict says True as every DONE was sent
    grants = coordinator.logic.on_control(fields, now_ms())
    log.info(
        "%s from %s/p%d/r%d (stagger=%s) -> %s",
        msg.kind.value,
        msg.node,
        msg.partition,
        msg.replica,
        fields["stagger"],
        ", ".join(g.key for g in grants) or "no grant",
    )
    await send_grants(coordinator, grants)


async def on_tick(coordinator: Coordinator) -> None:
    """Once the tables are recovered: our heartbeat, failure detection, lease expiry, waiting grants."""
    if not coordinator.ready():
        return
    now = now_ms()
    if coordinator.ready_since is None:
        coordinator.ready_since = now
        log.info(
            "tables recovered: %d replicas, %d reconciliation entries",
            len(list(coordinator.replicas.keys())),
            len(list(coordinator.recon.keys())),
        )
    await _beat(coordinator, now)
    logic = coordinator.logic
    # Detect failures only once the heartbeats that queued up while we were down are
    # read, or a restart would flag live replicas FAILED for a moment.
    failed = logic.mark_failures(now) if coordinator.caught_up else []
    for key in failed:
        log.warning("replica %s FAILED: no heartbeat for more than %d ms", key, coordinator.spec.dpc.failure_timeout)
    for key in logic.expire_leases(now):
        log.warning("grant of %s released: lease of %d ms expired", key, logic.lease_ms)
    await send_grants(coordinator, logic.decide_all(now))


async def send_grants(coordinator: Coordinator, grants: list[Grant]) -> None:
    for g in grants:
        log.info("GRANT %s (stagger=%s)", g.key, g.stagger)
        coordinator.grants_sent += 1
        grant = GrantMessage(g.node, g.partition, g.replica, stagger=g.stagger, round_ms=g.round_ms)
        await coordinator.control.send(key=g.node.encode(), value=encode_control(grant))


async def _beat(coordinator: Coordinator, now: int) -> None:
    """The coordinator's own heartbeat (node ``coordinator``), so nodes can tell it is alive."""
    beat = Heartbeat(COORDINATOR, 0, 0, NodeState.STABLE, now, coordinator.started_ms, os.getpid())
    await coordinator.heartbeats.send(key=COORDINATOR.encode(), value=beat.encode())
