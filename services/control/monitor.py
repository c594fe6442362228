"""The replica monitor: the latest state of every node replica partition, from the heartbeat topic.

Liveness is judged by when a heartbeat *arrived* here (this host's monotonic clock), never
by the sender's clock, so a replica whose clock is off is seen like any other.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Protocol

from confluent_kafka import OFFSET_END, TopicPartition

from services.control.messages import CLAIM_EPOCH, COORDINATOR, Heartbeat, replica_key
from services.control.states import NodeState
from services.core.errors import DecodeError
from services.core.kafka import plain_consumer
from services.core.retry import retry_transient


@dataclass
class ReplicaStatus:
    node: str
    partition: int
    replica: int
    state: NodeState
    sent_ms: int
    seen: float | None  # local monotonic time the last heartbeat arrived; None: known only from history
    pid: int = 0
    stable: int = 0  # stable tuples written
    boundary_ms: int = -1  # how far its stable output has come
    lag: int = 0  # input messages it has not processed yet
    role: str = ""  # an HA scheme's replica: primary, secondary or candidate
    epoch: int = 0  # the epoch it reports

    def alive(self, timeout_s: float, now: float | None = None) -> bool:
        if self.seen is None:
            return False
        return ((now if now is not None else time.monotonic()) - self.seen) <= timeout_s


class Monitor(Protocol):
    """What schemes and input ports read of a ``ReplicaMonitor``, so tests can set replica states instead."""

    timeout_s: float

    def state(self, node: str, partition: int, replica: int) -> NodeState: ...

    def states(self, node: str, partition: int, replicas: int) -> list[NodeState]: ...

    def boundaries(self, node: str, partition: int, replicas: int) -> list[int]: ...


class ReplicaMonitor:
    """Follows the heartbeat topic in a background thread: the latest status of every replica.

    Starts a little before the end of the topic so a fresh process knows the current
    states at once; what was there before it started tells a replica's state, but only a
    heartbeat that arrives afterwards shows that it lives (within one heartbeat interval).

    Each incarnation of a node replica has an epoch (``services.node.fence``): once one is
    seen, heartbeats of lower epochs for the same replica come from a replaced copy and are
    ignored, so a resumed copy can neither look alive nor change the replica's state.
    """

    def __init__(self, bootstrap: str, topic: str, timeout_s: float, history: int = 500) -> None:
        self.timeout_s = timeout_s
        self.status: dict[str, ReplicaStatus] = {}
        self.epochs: dict[str, int] = {}  # replica key -> the highest epoch seen
        self._lock = threading.Lock()
        self._c = plain_consumer(bootstrap, "monitor", unique=True, **{"fetch.wait.max.ms": 20})
        low, high = retry_transient(self._c.get_watermark_offsets)(TopicPartition(topic, 0), timeout=10)
        self._read = max(low, high - history)  # the offset after the last heartbeat read
        self._c.assign([TopicPartition(topic, 0, self._read if high > 0 else OFFSET_END)])
        self._history_end = high  # heartbeats below this offset were sent before we started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replica-monitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(500, 0.1):
                if m.error() is not None:
                    continue
                self._read = max(self._read, (m.offset() or 0) + 1)
                try:
                    hb = Heartbeat.decode(m.value() or b"")
                except (DecodeError, ValueError, KeyError):
                    continue
                if hb.epoch == CLAIM_EPOCH:
                    hb = replace(hb, epoch=(m.offset() or 0) + 1)
                self.apply(hb, time.monotonic(), fresh=(m.offset() or 0) >= self._history_end)

    def apply(self, hb: Heartbeat, now: float, fresh: bool = True) -> None:
        """One heartbeat, arrived at ``now`` (monotonic); a stale one (history) gives the state only."""
        key = replica_key(hb.node, hb.partition, hb.replica)
        with self._lock:
            if hb.epoch > 0 and hb.node != COORDINATOR:
                if hb.epoch < self.epochs.get(key, 0):
                    return  # from a replaced copy of the replica: its successor speaks for it
                self.epochs[key] = hb.epoch
            cur = self.status.get(key)
            if cur is not None and cur.pid == hb.pid and hb.sent_ms < cur.sent_ms:
                return  # older than what this process already said
            seen = now if fresh else (cur.seen if cur is not None else None)
            self.status[key] = ReplicaStatus(
                hb.node,
                hb.partition,
                hb.replica,
                hb.state,
                hb.sent_ms,
                seen,
                hb.pid,
                hb.stable,
                hb.boundary_ms,
                hb.lag,
                hb.role,
                hb.epoch,
            )

    def get(self, node: str, partition: int, replica: int) -> ReplicaStatus | None:
        with self._lock:
            return self.status.get(replica_key(node, partition, replica))

    def state(self, node: str, partition: int, replica: int) -> NodeState:
        """Current state of one replica: FAILED if never seen or silent past the timeout."""
        st = self.get(node, partition, replica)
        if st is None or not st.alive(self.timeout_s):
            return NodeState.FAILED
        return st.state

    def states(self, node: str, partition: int, replicas: int) -> list[NodeState]:
        """Every replica's state for one node partition, by replica number."""
        return [self.state(node, partition, r) for r in range(replicas)]

    def boundaries(self, node: str, partition: int, replicas: int) -> list[int]:
        """How far each replica's stable output has come (its last BOUNDARY; -1 if unknown)."""
        out = []
        for r in range(replicas):
            st = self.get(node, partition, r)
            out.append(st.boundary_ms if st is not None else -1)
        return out

    def epoch(self, node: str, partition: int, replica: int) -> int:
        """The highest epoch seen of one node replica partition (0: none)."""
        with self._lock:
            return self.epochs.get(replica_key(node, partition, replica), 0)

    def read_up_to(self, end: int, timeout: float = 5.0) -> bool:
        """Wait until every heartbeat before offset ``end`` has been read; whether that took less than ``timeout``."""
        deadline = time.monotonic() + timeout
        while self._read < end and time.monotonic() < deadline:
            time.sleep(0.005)
        return self._read >= end

    def snapshot(self) -> list[ReplicaStatus]:
        with self._lock:
            return list(self.status.values())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._c.close()
