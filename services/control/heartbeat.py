"""Heartbeats: every node replica partition announces its state on ``<spec>.heartbeats``.

Anyone can follow that topic (``services.control.monitor.ReplicaMonitor``) to know which
replicas are alive and in which DPC state; a replica silent for ``failure_timeout`` counts
as FAILED.
"""

from __future__ import annotations

import logging
import threading

from services.control.messages import Heartbeat, now_ms
from services.core.kafka import BatchProducer
from services.dpc.states import NodeState

log = logging.getLogger(__name__)


class HeartbeatSender:
    """Sends this replica's heartbeat from a background thread, so a long reconciliation
    does not look like a crash; a SIGSTOP'd or killed process stops sending."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        node: str,
        partition: int,
        replica: int,
        interval_s: float,
        producer: BatchProducer | None = None,
    ) -> None:
        self.topic, self.node, self.partition, self.replica = topic, node, partition, replica
        self.interval_s = interval_s
        self.state = NodeState.STABLE
        self.epoch = 0
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

    def beat(self) -> None:
        hb = Heartbeat(self.node, self.partition, self.replica, self.state, now_ms(), self.epoch)
        self._producer.send(self.topic, hb.encode(), self.node.encode(), 0)
        self._producer.poll(0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception as e:  # a broker hiccup must not kill the heartbeat thread
                log.debug("heartbeat not sent: %s", e)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        try:
            self._producer.flush(5)
        except Exception as e:
            log.debug("last heartbeats not flushed: %s", e)
