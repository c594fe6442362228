"""The control plane's messages as typed values: heartbeats and the reconciliation handshake.

Reconciliation is a handshake on ``<spec>.control``: a replica that can reconcile sends
REQUEST, the coordinator answers GRANT so replicas of one node take turns, the replica
sends DONE. Heartbeats on ``<spec>.heartbeats`` carry each replica's state. Both topics
have one partition, so every reader sees one order. This module is the only place that
knows how these messages look on the wire. Each kind of control message is its own class
with only the fields it uses (``ControlMessage`` is their union), so a reader that matches
the class knows which fields it has.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar, Literal, TypeAlias

from services.control.states import NodeState, Role
from services.core.codec import codec_for
from services.core.errors import FencedError

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


# What a kind does not carry is written as the schema's default, so every kind's bytes and
# ``as_dict`` are as they were when one class carried every field. In ``as_dict``'s order.
_SCHEMA_DEFAULTS: dict[str, Any] = {"stagger": True, "round_ms": 0, "role": "", "epoch": 0, "ids": {}}
_ORDER = ("node", "partition", "replica", "stagger", "sent_ms", "round_ms", "role", "epoch", "ids")


@dataclass(frozen=True, slots=True)
class _Addressed:
    """What every control message carries: the node replica partition it is from or for, and when it was sent."""

    kind: ClassVar[ControlKind]
    node: str
    partition: int
    replica: int
    sent_ms: int = 0  # 0 until sent: ``encode_control`` stamps the wall clock

    def is_for(self, node: str, partition: int, replica: int) -> bool:
        return (self.node, self.partition, self.replica) == (node, partition, replica)

    def as_dict(self) -> dict[str, Any]:
        """One shape for every kind (the coordinator's decisions take it): what a kind lacks has its default."""
        return {"kind": self.kind.value} | {k: v for k, v in _fields(self).items() if k != "ids"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Request(_Addressed):
    """A replica that can reconcile asks for its turn; ``stagger=False`` asks for no turn-taking (Suspend)."""

    kind: ClassVar[Literal[ControlKind.REQUEST]] = ControlKind.REQUEST
    stagger: bool = True
    round_ms: int = 0  # the replica's reconciliation round: its clock at the round's first REQUEST


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant(_Addressed):
    """The coordinator gives a replica its turn, for the round the REQUEST named."""

    kind: ClassVar[Literal[ControlKind.GRANT]] = ControlKind.GRANT
    stagger: bool = True
    round_ms: int = 0  # echoes the REQUEST's, so the replica matches it to its round without comparing clocks


@dataclass(frozen=True, slots=True, kw_only=True)
class Done(_Addressed):
    """The replica finished reconciling (or gives back a grant of a round that is over)."""

    kind: ClassVar[Literal[ControlKind.DONE]] = ControlKind.DONE
    round_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleOrder(_Addressed):
    """The coordinator's takeover order to a replica of an HA scheme (``services.coordinator.takeover``)."""

    kind: ClassVar[Literal[ControlKind.ROLE]] = ControlKind.ROLE
    role: str  # "primary" or "secondary"
    epoch: int  # the partition's epoch from now on: a primary writes with it, older writers are fenced


@dataclass(frozen=True, slots=True, kw_only=True)
class Trim(_Addressed):
    """An active standby primary tells its secondaries what its log holds (``services.ha.active_standby``)."""

    kind: ClassVar[Literal[ControlKind.TRIM]] = ControlKind.TRIM
    epoch: int  # the sender's
    ids: dict[str, int] = field(default_factory=dict)  # output stream -> last stable id the log holds


ControlMessage: TypeAlias = Request | Grant | Done | RoleOrder | Trim
_BY_KIND: dict[ControlKind, type[ControlMessage]] = {c.kind: c for c in (Request, Grant, Done, RoleOrder, Trim)}


def ordered_role(
    msg: ControlMessage, node: str, partition: int, replica: int, role: Role, epoch: int
) -> tuple[Role, int] | None:
    """The role ``msg`` orders this replica (now ``role`` at ``epoch``) to take, and its epoch: PRIMARY
    for a promotion, SECONDARY; None for another replica's order, an earlier epoch's read late, or a
    primary told again. A primary told it is secondary was failed over while it stood still:
    ``FencedError``, it stops writing."""
    if not isinstance(msg, RoleOrder) or not msg.is_for(node, partition, replica) or msg.epoch < epoch:
        return None
    if msg.role == Role.PRIMARY:
        return (Role.PRIMARY, msg.epoch) if role is not Role.PRIMARY else None
    if msg.role != Role.SECONDARY:
        return None
    if role is Role.PRIMARY:
        raise FencedError(
            f"{node} p{partition} r{replica} was failed over to another replica (epoch {msg.epoch}): "
            "it stops writing and restarts as a secondary"
        )
    return Role.SECONDARY, msg.epoch


def _fields(msg: _Addressed) -> dict[str, Any]:
    """Every field of the schema but ``kind``: the message's own, and the default of those its kind lacks."""
    own = {f.name: getattr(msg, f.name) for f in fields(msg)}
    return {k: own[k] if k in own else _SCHEMA_DEFAULTS[k] for k in _ORDER}


def encode_control(msg: ControlMessage) -> bytes:
    return _CONTROL.encode({"kind": msg.kind.value, **_fields(msg), "sent_ms": msg.sent_ms or now_ms()})


def decode_control(payload: bytes) -> ControlMessage:
    """The message of its kind's class. Raises DecodeError (bad Avro) or ValueError (unknown kind)."""
    record: dict[str, Any] = {**_SCHEMA_DEFAULTS, **_CONTROL.decode(payload)}
    cls = _BY_KIND[ControlKind(record["kind"])]
    own = {f.name: record[f.name] for f in fields(cls)}
    if "ids" in own:
        own["ids"] = dict(own["ids"])
    return cls(**own)


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
    # output stream -> the oldest id a takeover by this replica checks in the log (``services.coordinator.trims``)
    keeps: dict[str, int] = field(default_factory=dict)
    # input topic -> the oldest offset a recovery of this node partition reads again (``services.coordinator.trims``)
    needs: dict[str, int] = field(default_factory=dict)
    held: int = 0  # an active standby secondary: results it holds that the primary's log does not have yet
    checkpoint_ms: int = -1  # a passive standby secondary: when its newest checkpoint was taken

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
                "keeps": self.keeps,
                "needs": self.needs,
                "held": self.held,
                "checkpoint_ms": self.checkpoint_ms,
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
            dict(hb.get("keeps") or {}),
            dict(hb.get("needs") or {}),
            hb.get("held", 0),
            hb.get("checkpoint_ms", -1),
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
            "keeps": self.keeps,
            "needs": self.needs,
            "held": self.held,
            "checkpoint_ms": self.checkpoint_ms,
        }
