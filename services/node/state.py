"""The state store seam: how a scheme keeps its recovery points and gets the newest one back.

A scheme decides *when* a recovery point is due and *what* it is (where the inputs stand, the
outputs' next ids, whether it is taken inside an upstream failure); its store decides *how* the
point is kept: DPC's restart images (``RestartImages``, here), passive standby's checkpoints of
deltas between images (``services.ha.checkpoints``), and next CEC's partial checkpoints in the
output log. The store writes in the background: the loop only hands it the point.

Which store a node keeps is the spec's (``state:``, in the node's plan), from the registry of
stores (``services.spec.stores``); a scheme gets it from ``build_store`` and never names its class.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

from services.control.messages import now_ms
from services.core.factories import factory
from services.dpc.sunion import SUnion, SUnionState
from services.log.tail import last_stable_id, seek_after_stable
from services.node import restart
from services.node.path import StablePath
from services.node.scheme import NodeRuntime
from services.spec.stores import STORES


@dataclass
class InputPoint:
    """SUnion's state and where every input stands: what a recovery point holds, and where a
    spilled failure's redo goes back to (the failure's start)."""

    sunion: SUnionState
    ports: dict[str, tuple[int, int]]  # input stream -> (replica read, last stable id)
    offsets: dict[str, int]  # input topic -> next offset


def input_point(node: NodeRuntime, sunion: SUnion, offsets: dict[str, int] | None = None) -> InputPoint:
    """SUnion's state and every port's replica, last stable id and offset (``offsets`` if given) now."""
    return InputPoint(
        sunion.state(),
        {p.stream: (p.replica, p.last_stable) for p in node.inputs.ports},
        offsets if offsets is not None else node.inputs.positions(),
    )


@dataclass
class RecoveryPoint:
    """What a scheme hands its store: its inputs' point, each output's SOutput state (next stable id,
    last boundary), and the operators' state when it is not the pipeline's now (``snapshot``: the
    state from before an upstream failure the point is taken in, ``failed``)."""

    inputs: InputPoint
    outputs: dict[str, tuple[int, int]]
    failed: bool = False
    snapshot: bytes | None = None


class StateStore(Protocol):
    """Takes a node replica partition's recovery points and recovers the newest."""

    restores: bool  # ``recover`` puts the state into the operators itself (the point's snapshot is empty)

    @property
    def busy(self) -> bool:
        """A point is still being written."""

    def take(self, point: RecoveryPoint) -> None:
        """Keep ``point`` (with the operators' state): pickled now, written in the background."""

    def recover(self) -> restart.RestartImage | None:
        """The newest point kept, whole, or None."""

    def wait(self) -> None:
        """Until every point taken is written (or has failed)."""

    def new_chain(self) -> None:
        """A new primary takes over: the points it takes from now on owe nothing to the old one's."""

    def written(self) -> RecoveryPoint | None:
        """The newest point written since the last call (None: none): a recovery now starts at it or later."""


class WrittenPoints:
    """The points a store took, each until the image writer has written it (``Images.written``)."""

    def __init__(self, node: NodeRuntime) -> None:
        self.node = node  # its image writer is made after its scheme
        self.pending: deque[tuple[int, RecoveryPoint]] = deque()

    def taken(self, first: int, point: RecoveryPoint) -> None:
        """``point`` was handed over as writes ``first`` on."""
        self.pending.append((first, point))

    def newest(self) -> RecoveryPoint | None:
        """The newest point written since the last call, if any."""
        out, done = None, self.node.images.written
        while self.pending and self.pending[0][0] <= done:
            out = self.pending.popleft()[1]
        return out


def build_store(node: NodeRuntime, topic: str, path: StablePath) -> StateStore:
    """The store the node's plan names (``state:``, else its scheme's default), keeping ``topic``, with the
    stable ``path`` the scheme runs (a store may record it); its class is the one its descriptor names
    (``services.spec.stores``)."""
    name = node.plan.state
    if name is None:
        raise ValueError(f"node '{node.plan.node}' runs {node.plan.scheme.value}, which keeps no state store")
    store: StateStore = factory(STORES[name].factory)(node, topic, path)
    return store


class RestartImages:
    """DPC's store: each point is a whole restart image in the replica's restart topic."""

    restores = False

    def __init__(self, node: NodeRuntime, topic: str, path: StablePath | None = None) -> None:
        self.node, self.topic = node, topic

    @property
    def busy(self) -> bool:
        return self.node.images.busy

    def take(self, point: RecoveryPoint) -> None:
        node = self.node
        snapshot = point.snapshot if point.snapshot is not None else node.pipeline.snapshot(node.tick)
        inputs = point.inputs
        image = restart.RestartImage(
            snapshot, inputs.sunion, point.outputs, inputs.ports, inputs.offsets, now_ms(), point.failed
        )
        node.images.write(image, node.tick)  # pickled here; chunked and written in the background

    def recover(self) -> restart.RestartImage | None:
        node = self.node
        return restart.load(node.settings.bootstrap, self.topic, node.partition)

    def wait(self) -> None:
        self.node.images.wait()

    def written(self) -> RecoveryPoint | None:
        """None: a DPC replica's logs are its own, never trimmed for it (``services.coordinator.trims``)."""
        return None

    def new_chain(self) -> None:
        """Each image is whole: a new primary's first one needs nothing before it."""


# The longest read back a store's recovery may take (a log's tail, a changelog) with heartbeats going on.
RECOVERY_S = 600.0


def replay_point(node: NodeRuntime, path: StablePath, last: int) -> restart.RestartImage:
    """What a store that put the operators' state back itself (``StateStore.restores``: CEC's log, the
    changelog) recovers to: the state holds the input up to id ``last``, so every input is read again
    right after it, and each output's ids go on after the last its log holds (none is regenerated)."""
    bootstrap, out = node.settings.bootstrap, node.outputs
    nexts = {}
    for s in path.soutputs:
        written = last_stable_id(bootstrap, out.topic(s), out.kafka_partition(s))
        nexts[s] = (0 if written is None else written + 1, -1)
    ports = {p.stream: (p.replica, last) for p in node.inputs.ports}
    offsets = {p.topic: seek_after_stable(bootstrap, p.topic, node.partition, last)[0] for p in node.inputs.ports}
    return restart.RestartImage(b"", path.sunion.state(), nexts, ports, offsets, now_ms())
