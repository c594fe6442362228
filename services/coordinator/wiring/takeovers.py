"""HA takeovers: heartbeats into the role table, the timer that checks it, the epoch claims of its
elections (in threads, beside each other, with one kept producer: a slow broker holds up no
heartbeat, trim or other partition's takeover), and the role orders it gives on the control topic
(``services.coordinator.takeover`` decides)."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import faust
from confluent_kafka import KafkaException

from services.control.messages import COORDINATOR, Heartbeat, RoleOrder, encode_control, now_ms
from services.control.states import NodeState, Role
from services.coordinator.takeover import Election, Order, Takeovers
from services.node.fence import EpochClaimer
from services.spec import Spec
from services.spec.egress import egress_units

if TYPE_CHECKING:
    from services.coordinator.app import Coordinator

log = logging.getLogger("hastream.coordinator")

ROLES = frozenset(r.value for r in Role)
CLAIMERS = 4  # epoch claims under way at once


def takeovers_of(spec: Spec) -> Takeovers:
    """The role table of the spec's HA-scheme nodes and its egresses (each a primary per partition, its
    successor elected as an HA node's is); new primaries' epochs are claimed on the heartbeat topic."""
    nodes = {n: (nd.replicas, nd.ha.detection_ms / 1000) for n, nd in spec.nodes.items() if nd.ha.scheme.kind.takeovers}
    nodes.update({n: (e.replicas, e.detection_ms / 1000) for n, (_, e) in egress_units(spec).items()})
    return Takeovers(nodes, claims=True)


def heartbeat_ms(spec: Spec, node: str) -> int:
    """The keep-alive interval of an HA node or an egress."""
    unit = egress_units(spec).get(node)
    return unit[1].heartbeat_ms if unit is not None else spec.nodes[node].ha.heartbeat_ms


def wire(app: faust.App, coordinator: Coordinator) -> None:
    """Timer ``takeovers``, four times per heartbeat interval of the fastest HA node or egress, if the spec
    has any."""
    if not coordinator.takeovers.nodes:
        return
    every = min(heartbeat_ms(coordinator.spec, n) for n in coordinator.takeovers.nodes)
    claims = _Claims(EpochClaimer(coordinator.bootstrap, coordinator.spec.heartbeat_topic))

    @app.timer(interval=every / 4000, name="takeovers")
    async def takeovers() -> None:
        if coordinator.ready() and coordinator.caught_up:
            await send_orders(coordinator, coordinator.takeovers.check(time.monotonic()))
            for e in coordinator.takeovers.take_elections():
                log.info("%s/p%d/r%d is elected: claiming its epoch", e.node, e.partition, e.replica)
                claims.start(coordinator, e)


class _Claims:
    """The epoch claims under way, each a task awaiting a thread of its own."""

    def __init__(self, claimer: EpochClaimer) -> None:
        self.claimer = claimer
        self.pool = ThreadPoolExecutor(CLAIMERS, thread_name_prefix="claim")
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, coordinator: Coordinator, e: Election) -> None:
        task = asyncio.get_running_loop().create_task(self._claim(coordinator, e))
        self.tasks.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self.tasks.discard)

    async def _claim(self, coordinator: Coordinator, e: Election) -> None:
        loop, takeovers = asyncio.get_running_loop(), coordinator.takeovers
        try:
            epoch = await loop.run_in_executor(self.pool, self.claimer.claim, e.node, e.partition, e.replica)
        except KafkaException as err:
            log.warning("%s/p%d: no epoch claimed for r%d (%s): elected again", e.node, e.partition, e.replica, err)
            takeovers.unclaimed(e)
            return
        await send_orders(coordinator, takeovers.claimed(e, epoch, time.monotonic()))


async def heard(coordinator: Coordinator, beat: Heartbeat) -> None:
    """Every heartbeat shows the intake moves; an HA replica's, once the backlog is read, may change roles."""
    takeovers = coordinator.takeovers
    now, sent_at = _intake(coordinator, beat)
    if beat.node in takeovers.nodes and coordinator.caught_up:
        reported = (Role(beat.role), beat.epoch) if beat.role in ROLES else None
        behind = beat.state is NodeState.RECOVERING
        orders = takeovers.heard(
            beat.node, beat.partition, beat.replica, now, reported, sent_at, beat.pid or None, behind
        )
        await send_orders(coordinator, orders)


async def heard_claim(coordinator: Coordinator, beat: Heartbeat) -> None:
    """An epoch claim's heartbeat shows only that the intake moves."""
    _intake(coordinator, beat)


def _intake(coordinator: Coordinator, beat: Heartbeat) -> tuple[float, float]:
    """The coordinator's view is as current as ``beat`` (silence means something): (now, when it was sent)."""
    now = time.monotonic()
    sent_at = now - max(0.0, (now_ms() - beat.sent_ms) / 1000)  # read late if the intake or its sender lags
    coordinator.takeovers.intake(sent_at, now, own=beat.node == COORDINATOR)
    return now, sent_at


async def send_orders(coordinator: Coordinator, orders: list[Order]) -> None:
    for o in orders:
        log.info("%s/p%d/r%d is %s at epoch %d", o.node, o.partition, o.replica, o.role.value, o.epoch)
        coordinator.orders_sent += 1
        msg = RoleOrder(o.node, o.partition, o.replica, role=o.role.value, epoch=o.epoch)
        await coordinator.control.send(key=o.node.encode(), value=encode_control(msg))
