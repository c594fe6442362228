"""The control plane's messages as typed values: heartbeats and the reconciliation handshake.

Reconciliation is a handshake on ``<spec>.control``: a replica that can reconcile sends
REQUEST, the coordinator answers GRANT so replicas of one node take turns, the replica
sends DONE. Heartbeats on ``<spec>.heartbeats`` carry each replica's state. Both topics
have one partition, so every reader sees one order. This module is the only place that
knows how these messages look on the wire.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from services.control.states import NodeState
from services.core.codec import codec_for

COORDINATOR = "coordinator"  # the ``node`` of the coordinator's own heartbeat
_HEARTBEAT = codec_for("heartbeat")
_CONTROL = codec_for("control")


def now_ms() -> int:
    return int(time.time() * 1000)


# The epoch field of a claim: the heartbeat a node replica sends first, whose offset + 1 is
# its epoch (``services.node.fence``). Kafka gives offsets in one order, so every later start
# of the replica gets a higher epoch, with no coordinator involved.
CLAIM_EPOCH = -1


def replica_key(node: str, partition: int, replica: int) -> str:
    """How the control plane names one node replica partition: ``node/pX/rY``."""
    return f"{node}/p{partition}/r{replica}"


class ControlKind(str, Enum):
    REQUEST = "REQUEST"  # a replica may reconcile and asks for its turn
    GRANT = "GRANT"  # the coordinator gives it the turn
    DONE = "DONE"  # the replica finished reconciling
    ROLE = "ROLE"  # the coordinator's takeover order to a replica of an HA scheme (``services.coordinator.takeover``)
    TRIM = "TRIM"  # an active standby primary tells its secondaries what its log holds (``services.ha.active_standby``)


@dataclass(frozen=True, slots=True)
class ControlMessage:
    """One message of the reconciliation handshake; ``stagger=False`` asks for no turn-taking (Suspend)."""

    kind: ControlKind
    node: str
    partition: int
    replica: int
    stagger: bool = True
    sent_ms: int = 0
    round_ms: int = 0  # which reconciliation round of the replica it belongs to (a GRANT echoes the REQUEST's)
    role: str = ""  # ROLE: "primary" or "secondary"
    epoch: int = 0  # ROLE: the partition's epoch from now on; TRIM: the sender's
    ids: dict[str, int] = field(default_factory=dict)  # TRIM: output stream -> last stable id the log holds

    def encode(self) -> bytes:
        return _CONTROL.encode(
            {
                "kind": self.kind.value,
                "node": self.node,
                "partition": self.partition,
                "replica": self.replica,
                "stagger": self.stagger,
                "sent_ms": self.sent_ms or now_ms(),
                "round_ms": self.round_ms,
                "role": self.role,
                "epoch": self.epoch,
                "ids": self.ids,
            }
        )

    @classmethod
    def decode(cls, payload: bytes) -> ControlMessage:
        """Raises DecodeError (bad Avro) or ValueError (unknown kind)."""
        c = _CONTROL.decode(payload)
        return cls(
            ControlKind(c["kind"]),
            c["node"],
            c["partition"],
            c["replica"],
            c["stagger"],
            c["sent_ms"],
            c["round_ms"],
            c.get("role", ""),
            c.get("epoch", 0),
            dict(c.get("ids", {})),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "node": self.node,
            "partition": self.partition,
            "replica": self.replica,
            "stagger": self.stagger,
            "sent_ms": self.sent_ms,
            "round_ms": self.round_ms,
            "role": self.role,
            "epoch": self.epoch,
        }

    def is_for(self, node: str, partition: int, replica: int) -> bool:
        return (self.node, self.partition, self.replica) == (node, partition, replica)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A replica's periodic "I am alive, in this state, this far": sent only while its loop makes progress."""

    node: str
    partition: int
    replica: int
    state: NodeState
    sent_ms: int
    epoch: int = 0
    pid: int = 0
    stable: int = 0  # stable tuples written, over every output
    boundary_ms: int = -1  # the last BOUNDARY it sent: how far its stable output has come
    lag: int = 0  # input messages not yet processed
    role: str = ""  # an HA scheme's replica: "primary", "secondary", or "candidate" until told

    def encode(self) -> bytes:
        return _HEARTBEAT.encode(
            {
                "node": self.node,
                "replica": self.replica,
                "partition": self.partition,
                "state": self.state.value,
                "epoch": self.epoch,
                "sent_ms": self.sent_ms,
                "pid": self.pid or os.getpid(),
                "stable": self.stable,
                "boundary_ms": self.boundary_ms,
                "lag": self.lag,
                "role": self.role,
            }
        )

    @classmethod
    def decode(cls, payload: bytes) -> Heartbeat:
        """Raises DecodeError (bad Avro) or ValueError (unknown state)."""
        hb = _HEARTBEAT.decode(payload)
        return cls(
            hb["node"],
            hb["partition"],
            hb["replica"],
            NodeState(hb["state"]),
            hb["sent_ms"],
            hb.get("epoch", 0),
            hb.get("pid", 0),
            hb.get("stable", 0),
            hb.get("boundary_ms", -1),
            hb.get("lag", 0),
            hb.get("role", ""),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "partition": self.partition,
            "replica": self.replica,
            "state": self.state.value,
            "sent_ms": self.sent_ms,
            "epoch": self.epoch,
            "pid": self.pid,
            "stable": self.stable,
            "boundary_ms": self.boundary_ms,
            "lag": self.lag,
            "role": self.role,
        }
