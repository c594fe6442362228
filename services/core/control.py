"""The control plane shared by nodes, clients and the coordinator: heartbeats and reconciliation grants.

Every node replica partition publishes a heartbeat with its DPC state to
``<spec>.heartbeats`` every ``heartbeat_interval``; anyone can follow that topic to know
which replicas are alive and which are STABLE (``ReplicaMonitor``). Reconciliation is a
handshake on ``<spec>.control``: a replica that can reconcile sends REQUEST, the
coordinator answers GRANT so replicas of one node take turns, the replica sends DONE.
Both topics have one partition, so every reader sees one order.
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass
from enum import Enum

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from services.core.codec import DecodeError, codec_for
from services.core.kafka import RDKAFKA_LOG, BatchProducer, retry_transient


class NodeState(str, Enum):
    STABLE = "STABLE"
    UPSTREAM_FAILURE = "UPSTREAM_FAILURE"
    STABILIZATION = "STABILIZATION"
    FAILED = "FAILED"  # no heartbeat within failure_timeout (set by observers, never sent)


COORDINATOR = "coordinator"  # the ``node`` of the coordinator's own heartbeat
HEARTBEAT = codec_for("heartbeat")
CONTROL = codec_for("control")


def now_ms() -> int:
    return int(time.time() * 1000)


def replica_key(node: str, partition: int, replica: int) -> str:
    return f"{node}/p{partition}/r{replica}"


@dataclass
class ReplicaStatus:
    node: str
    partition: int
    replica: int
    state: NodeState
    sent_ms: int
    seen: float  # local monotonic time the last heartbeat arrived
    pid: int = 0

    def alive(self, timeout_s: float, now: float | None = None) -> bool:
        return ((now if now is not None else time.monotonic()) - self.seen) <= timeout_s


class HeartbeatSender:
    """Sends this replica's heartbeat from a background thread, so a long reconciliation
    does not look like a crash; a SIGSTOP'd or killed process stops sending."""

    def __init__(self, bootstrap: str, topic: str, node: str, partition: int, replica: int,
                 interval_s: float, producer: BatchProducer | None = None) -> None:
        self.topic, self.node, self.partition, self.replica = topic, node, partition, replica
        self.interval_s = interval_s
        self.state = NodeState.STABLE
        self.epoch = 0
        self._producer = producer or BatchProducer(bootstrap, linger_ms=0, **{"compression.type": "none"})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{node}", daemon=True)

    def start(self) -> "HeartbeatSender":
        self._thread.start()
        return self

    def set_state(self, state: NodeState) -> None:
        """Change state and announce it at once (downstream may switch replica on it)."""
        if state is not self.state:
            self.state = state
            self.beat()

    def beat(self) -> None:
        rec = {"node": self.node, "replica": self.replica, "partition": self.partition, "state": self.state.value,
               "epoch": self.epoch, "sent_ms": now_ms(), "pid": os.getpid()}
        self._producer.send(self.topic, HEARTBEAT.encode(rec), self.node.encode(), 0)
        self._producer.poll(0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception:  # a broker hiccup must not kill the heartbeat thread
                pass

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        try:
            self._producer.flush(5)
        except Exception:
            pass


class ReplicaMonitor:
    """Follows the heartbeat topic in a background thread: the latest status of every replica.

    Starts a little before the end of the topic so a fresh process knows the current
    states within one heartbeat interval.
    """

    def __init__(self, bootstrap: str, topic: str, timeout_s: float, history: int = 500) -> None:
        self.timeout_s = timeout_s
        self.status: dict[str, ReplicaStatus] = {}
        self._lock = threading.Lock()
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hastream.monitor.{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False, "logger": RDKAFKA_LOG, "fetch.wait.max.ms": 20})
        low, high = retry_transient(self._c.get_watermark_offsets)(TopicPartition(topic, 0), timeout=10)
        self._c.assign([TopicPartition(topic, 0, max(low, high - history) if high > 0 else OFFSET_END)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replica-monitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(500, 0.1):
                if m.error() is not None:
                    continue
                try:
                    hb = HEARTBEAT.decode(m.value())
                    state = NodeState(hb["state"])
                except (DecodeError, ValueError, KeyError):
                    continue
                key = replica_key(hb["node"], hb["partition"], hb["replica"])
                # A replayed old heartbeat counts from when it was sent, not when we read it.
                age = max(0.0, (now_ms() - hb["sent_ms"]) / 1000.0)
                st = ReplicaStatus(hb["node"], hb["partition"], hb["replica"], state, hb["sent_ms"],
                                   time.monotonic() - age, hb.get("pid", 0))
                with self._lock:
                    cur = self.status.get(key)
                    if cur is None or cur.sent_ms <= st.sent_ms:
                        self.status[key] = st

    def get(self, node: str, partition: int, replica: int) -> ReplicaStatus | None:
        with self._lock:
            return self.status.get(replica_key(node, partition, replica))

    def state(self, node: str, partition: int, replica: int) -> NodeState:
        """Current state of one replica: FAILED if never seen or silent past the timeout."""
        st = self.get(node, partition, replica)
        if st is None or not st.alive(self.timeout_s):
            return NodeState.FAILED
        return st.state

    def snapshot(self) -> list[ReplicaStatus]:
        with self._lock:
            return list(self.status.values())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._c.close()


def control_message(kind: str, node: str, partition: int, replica: int, stagger: bool = True) -> bytes:
    return CONTROL.encode({"kind": kind, "node": node, "partition": partition, "replica": replica,
                           "stagger": stagger, "sent_ms": now_ms()})
