"""The recovery-scheme slot: the points of the node loop where a scheme (DPC, and later the HA
algorithms, CEC and Flux) acts, and what of the node it may use.

The loop calls, in this order: ``on_restart`` once, then per iteration ``before_batch``
(what the node's intake admitted of the messages just polled, possibly none: the tuples went
to the scheme's merge, ``path``, see ``services.node.merge``) and ``after_batch``; every
``CHECK_INTERVAL_S`` ``on_input_move`` for each input that changed the upstream replica(s) it
reads, ``on_control`` for each control message, ``on_check`` and ``progress`` (what
heartbeats report); ``on_stop`` on a clean stop. The loop flushes the outputs after every
iteration. A scheme never polls or produces by itself: it works on the node's inputs,
operators and output queues.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from confluent_kafka import Message

from services.control.messages import ControlMessage
from services.control.monitor import Monitor
from services.control.states import NodeState
from services.core.config import Settings
from services.core.kafka import DataProducer
from services.node.merge import Admitted, InputMoved, Ordering
from services.node.outputs import Outputs
from services.node.pipeline import NodePipeline
from services.node.ports import Inputs
from services.node.restart import RestartImage
from services.operators.base import Item
from services.spec.plan import NodePlan

if TYPE_CHECKING:  # the intake uses this module's NodeRuntime
    from services.node.intake import Intake

CHECK_INTERVAL_S = 0.1  # how often upstream replicas and control messages are looked at


@dataclass
class NodeStats:
    consumed: int = 0
    produced: int = 0
    deadlettered: int = 0  # malformed input messages
    deadlettered_by: dict[str, int] = field(default_factory=dict)  # dead-letter records by reason label
    rejected: int = 0  # tuples the operators or the output schemas rejected
    tentative: int = 0
    undos_received: int = 0
    reconciliations: int = 0
    replays: int = 0  # reconciliations of spilled failures: redone from the logs
    switches: int = 0
    gaps: int = 0  # stable ids that did not come in order: read again from a replica's log
    restart_images: int = 0
    restart_image_bytes: int = 0  # size of the last restart image written
    skipped: dict[str, int] = field(default_factory=dict)


class Images(Protocol):
    """What a scheme uses of the node's ``services.log.images.ImageWriter``, so tests can write images at once."""

    @property
    def busy(self) -> bool:
        """An image is still being written."""

    @property
    def failed(self) -> int:
        """Writes that failed so far."""

    @property
    def last_bytes(self) -> int:
        """Size of the last image written."""

    @property
    def queued(self) -> int:
        """Writes handed over so far, numbered from 1."""

    @property
    def written(self) -> int:
        """The number of the last write a restart reaches (written, with every write it depends on)."""

    def write(self, image: RestartImage, progress: Callable[[], None]) -> None: ...

    def write_delta(self, data: bytes, chain: int, seq: int) -> None: ...

    def wait(self) -> None: ...


class NodeRuntime(Protocol):
    """What a scheme may use of the node replica it runs in."""

    plan: NodePlan
    partition: int
    replica: int
    settings: Settings
    stats: NodeStats
    inputs: Inputs
    pipeline: NodePipeline
    outputs: Outputs

    # Read-only, so that a node may hold any object doing what these protocols say (tests hold fakes).
    @property
    def producer(self) -> DataProducer: ...

    @property
    def images(self) -> Images:
        """Writes restart images in the background."""

    @property
    def monitor(self) -> Monitor: ...

    @property
    def intake(self) -> Intake:
        """Admits the input into the scheme's ``path``; writes an idle ingress's ticks (``tick_raw``)."""

    def set_state(self, state: NodeState) -> None:
        """Announce the replica's state (its heartbeats carry it)."""

    def set_role(self, role: str, epoch: int) -> None:
        """Announce an HA scheme's role and the epoch it knows (its heartbeats carry them)."""

    def set_keeps(self, keeps: dict[str, int]) -> None:
        """Announce, by output stream, the oldest id of its output log a takeover by this replica
        reads back (its heartbeats carry them): the coordinator trims the log no further."""

    def set_needs(self, needs: dict[str, int]) -> None:
        """Announce, by input topic, the oldest offset a recovery of this node partition reads again
        (its heartbeats carry them): the coordinator trims those logs no further."""

    def set_standby(self, held: int = 0, checkpoint_ms: int = -1) -> None:
        """Announce how far a secondary is behind (its heartbeats carry it): the results an active
        standby holds, the time of the checkpoint a passive standby holds; the defaults: neither."""

    def begin_writing(self, epoch: int | None = None) -> int:
        """Announce on every output that this replica writes now, with ``epoch`` or (None) a new epoch
        claimed for it; earlier writers are fenced. Returns the epoch."""

    def tick(self) -> None:
        """Long work on the loop made progress: heartbeats go on only while it does."""

    def working(self, limit_s: float) -> AbstractContextManager[None]:
        """Blocking work on the loop that is progress (a takeover's reads): heartbeats go on through it,
        for ``limit_s`` at most."""

    def send_control(self, msg: ControlMessage) -> None: ...

    def deadletter(self, msg: Message, reason: str) -> None:
        """A malformed input message goes to the dead-letter topic."""

    def reject(self, where: str, item: Item, reason: str) -> None:
        """A tuple the operators (``where``: an operator or an output stream) could not process goes there too."""


class RecoveryScheme(Protocol):
    # Whether the loop may leave a batch's output unacknowledged while it processes the next
    # (``Outputs.write``); if not, it waits for each one (``Outputs.flush``).
    overlap_writes: bool
    # Whether it needs, after every poll, where each input's log stands (``Admitted.positions``), and
    # each tuple's offset in its input's log (``STuple.offset``).
    wants_positions: bool
    # Whether a DPC upstream's tentative tuples reach its merge; if not, they count as not yet arrived:
    # the node waits for the stable stream that replaces them (an HA scheme's stable processing).
    takes_tentative: bool

    @property
    def path(self) -> Ordering:
        """Where the node's intake hands the tuples it admits (``services.node.merge``)."""

    def on_restart(self) -> dict[str, int] | None:
        """Before the first poll: continue from what survived a crash; returns the input offsets to
        start at, or None to read nothing yet (the scheme starts the inputs later, ``Inputs.read_from``).
        A scheme that writes at once calls ``NodeRuntime.begin_writing`` here."""

    def before_batch(self, batch: Admitted, now: float) -> None:
        """The node's intake admitted a poll's messages into ``path`` (deduplicated, each input in order,
        what is malformed dead-lettered)."""

    def after_batch(self, now: float, idle: bool) -> None:
        """Run the operators on what is ready and queue the results on the outputs."""

    def on_input_move(self, moved: InputMoved, now: float) -> None:
        """An input changed what it reads (its upstream replica failed, fell behind, reconciles or
        recovered); the intake has applied the switching rule to what it holds already."""

    def on_control(self, msg: ControlMessage, now: float) -> None: ...

    def on_check(self, now: float) -> None:
        """Periodic decisions: reconcile, persist a restart image."""

    def on_stop(self) -> None:
        """A clean stop: persist what a restart needs, unless the state cannot be trusted."""

    def progress(self) -> tuple[int, int]:
        """How far the output has come, for heartbeats: (stable tuples written, last boundary or -1)."""
