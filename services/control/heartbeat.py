"""Heartbeats: every node replica partition announces its state on ``<spec>.heartbeats``.

Anyone can follow that topic (``services.control.monitor.ReplicaMonitor``) to know which
replicas are alive, in which DPC state and how far their output has come; a replica silent
for ``failure_timeout`` counts as FAILED.

Heartbeats say that the data path works, not merely that the process exists: they are
sent only while the node's loop makes progress (``tick``). A loop blocked in a flush, a
stuck broker call or a starved CPU goes silent and is treated as failed, as the paper
treats long delays, so readers move to a partner that still produces.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from services.control.messages import Heartbeat, now_ms
from services.control.states import NodeState
from services.core.kafka import BatchProducer

log = logging.getLogger(__name__)


class _RawFlush(Protocol):
    """The producer's own client: flushed once, without retries, when the sender stops."""

    def flush(self, timeout: float) -> int: ...


class HeartbeatProducer(Protocol):
    """What a heartbeat sender uses of its ``BatchProducer``, so tests can record the beats instead."""

    def send(self, topic: str, value: bytes, key: bytes | None, partition: int) -> None: ...

    def poll(self, timeout: float) -> None: ...

    @property
    def raw(self) -> _RawFlush: ...


class HeartbeatSender:
    """Sends this replica's heartbeat from a background thread while the loop ticks within
    ``stall_s`` (None: no loop to watch); a SIGSTOP'd, killed or stalled process stops
    sending. Long work on the loop (a reconciliation's redo) ticks as it goes."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        node: str,
        partition: int,
        replica: int,
        interval_s: float,
        stall_s: float | None = None,
        state: NodeState = NodeState.STABLE,
        producer: HeartbeatProducer | None = None,
    ) -> None:
        self.topic, self.node, self.partition, self.replica = topic, node, partition, replica
        self.interval_s, self.stall_s = interval_s, stall_s
        self.state = state
        self.epoch = 0
        self.role = ""  # an HA scheme's replica: its role (``services.control.states.Role``)
        self.keeps: dict[str, int] = {}  # an HA replica's: what of its output log its takeover reads (replaced whole)
        self.needs: dict[str, int] = {}  # an HA replica's: what of its input logs a recovery reads (replaced whole)
        self.held, self.checkpoint_ms = 0, -1  # a standby's lag (``Heartbeat``)
        self.stable, self.boundary_ms, self.lag = 0, -1, 0  # the progress the next heartbeat reports
        self.ticked = time.monotonic()
        self.working_until = 0.0  # monotonic: blocking work on the loop that counts as progress (``working``)
        self.sent_at: float | None = None  # monotonic time of the last heartbeat handed to the producer
        self.stalled = False
        self._producer = producer or BatchProducer(bootstrap, linger_ms=0, **{"compression.type": "none"})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{node}", daemon=True)

    def start(self) -> HeartbeatSender:
        self._thread.start()
        return self

    def set_state(self, state: NodeState) -> None:
        """Change state and announce it at once (downstream may switch replica on it)."""
        if state is not self.state:
            self.state = state
            self.beat()

    def tick(self, now: float | None = None) -> None:
        """The loop made progress (at monotonic ``now``): heartbeats may go on."""
        self.ticked = time.monotonic() if now is None else now

    @contextmanager
    def working(self, limit_s: float) -> Iterator[None]:
        """Blocking work on the loop that is progress, each step bounded by its own timeout (a takeover's
        reads of Kafka): heartbeats go on through it, for ``limit_s`` at most. Held back, they made the
        coordinator fail a new primary whose reads outlasted the detection time on a loaded machine."""
        self.working_until = time.monotonic() + limit_s
        try:
            yield
        finally:
            self.working_until = 0.0
            self.tick()

    def report(self, stable: int, boundary_ms: int, lag: int) -> None:
        """How far the output has come and how much input waits: carried by the next heartbeats."""
        self.stable, self.boundary_ms, self.lag = stable, boundary_ms, lag

    def beat(self) -> None:
        hb = Heartbeat(
            self.node,
            self.partition,
            self.replica,
            self.state,
            now_ms(),
            self.epoch,
            stable=self.stable,
            boundary_ms=self.boundary_ms,
            lag=self.lag,
            role=self.role,
            keeps=self.keeps,
            needs=self.needs,
            held=self.held,
            checkpoint_ms=self.checkpoint_ms,
        )
        self._producer.send(self.topic, hb.encode(), self.node.encode(), 0)
        self._producer.poll(0)
        self.sent_at = time.monotonic()

    def age(self) -> float | None:
        """Seconds since the last heartbeat went out (None: none yet): grows while the loop stalls."""
        return None if self.sent_at is None else time.monotonic() - self.sent_at

    def due(self, now: float) -> bool:
        """Whether a heartbeat goes out now: only while the loop ticked within ``stall_s``."""
        stalled = self.stall_s is not None and now - self.ticked > self.stall_s and now > self.working_until
        if stalled != self.stalled:
            self.stalled = stalled
            if stalled:
                log.warning("no progress for %.1f s: heartbeats held until the loop moves again", now - self.ticked)
        return not stalled

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.due(time.monotonic()):
                continue
            try:
                self.beat()
            except Exception as e:  # a broker hiccup must not kill the heartbeat thread
                log.debug("heartbeat not sent: %s", e)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        try:  # one wait, not the data path's retries: these heartbeats are soon stale anyway
            self._producer.raw.flush(5)
        except Exception as e:
            log.debug("last heartbeats not flushed: %s", e)
