"""Control messages and heartbeats round-trip through their Avro form as typed values."""

from __future__ import annotations

from typing import Any

import pytest

from services.control.messages import (
    ControlKind,
    ControlMessage,
    Done,
    Grant,
    Heartbeat,
    Request,
    RoleOrder,
    Trim,
    decode_control,
    encode_control,
    replica_key,
)
from services.control.states import NodeState
from services.core.codec import codec_for
from services.core.errors import DecodeError

# Every field of the control schema but ``kind`` and ``ids``, set away from its default.
_EVERY_FIELD: dict[str, Any] = {
    "node": "n2",
    "partition": 1,
    "replica": 0,
    "stagger": False,
    "sent_ms": 1234,
    "round_ms": 1200,
    "role": "primary",
    "epoch": 7,
}

# One message of each kind with every field it has set, and the fields of today's ``as_dict``
# its kind does not carry, at the value they always had for that kind.
_EVERY_KIND: dict[ControlKind, tuple[ControlMessage, dict[str, Any]]] = {
    ControlKind.REQUEST: (Request("n2", 1, 0, sent_ms=1234, stagger=False, round_ms=1200), {"role": "", "epoch": 0}),
    ControlKind.GRANT: (Grant("n2", 1, 0, sent_ms=1234, stagger=False, round_ms=1200), {"role": "", "epoch": 0}),
    ControlKind.DONE: (Done("n2", 1, 0, sent_ms=1234, round_ms=1200), {"stagger": True, "role": "", "epoch": 0}),
    ControlKind.ROLE: (RoleOrder("n2", 1, 0, sent_ms=1234, role="primary", epoch=7), {"stagger": True, "round_ms": 0}),
    ControlKind.TRIM: (
        Trim("n2", 1, 0, sent_ms=1234, epoch=7, ids={"w": 3}),
        {"stagger": True, "round_ms": 0, "role": ""},
    ),
}


@pytest.mark.parametrize("kind", list(ControlKind))
def test_control_message_round_trip(kind: ControlKind) -> None:
    m, lacks = _EVERY_KIND[kind]
    back = decode_control(encode_control(m))
    assert back == m and back.kind is kind
    assert back.is_for("n2", 1, 0) and not back.is_for("n2", 1, 1)
    assert back.as_dict() == {"kind": kind.value, **_EVERY_FIELD} | lacks


@pytest.mark.parametrize("kind", list(ControlKind))
def test_each_kind_decodes_to_an_equal_message_of_its_class(kind: ControlKind) -> None:
    m, _ = _EVERY_KIND[kind]
    back = decode_control(encode_control(m))
    assert type(back) is type(m) and back == m


def _old_bytes(kind: str) -> bytes:
    """What the one class of every kind wrote: every field of the schema, whatever the kind."""
    return codec_for("control").encode({"kind": kind, **_EVERY_FIELD, "ids": {"w": 3, "x": 5}})


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("REQUEST", Request("n2", 1, 0, sent_ms=1234, stagger=False, round_ms=1200)),
        ("GRANT", Grant("n2", 1, 0, sent_ms=1234, stagger=False, round_ms=1200)),
        ("DONE", Done("n2", 1, 0, sent_ms=1234, round_ms=1200)),
        ("ROLE", RoleOrder("n2", 1, 0, sent_ms=1234, role="primary", epoch=7)),
        ("TRIM", Trim("n2", 1, 0, sent_ms=1234, epoch=7, ids={"w": 3, "x": 5})),
    ],
)
def test_bytes_of_the_old_encoding_decode_to_their_kinds_class(kind: str, expected: ControlMessage) -> None:
    back = decode_control(_old_bytes(kind))
    assert type(back) is type(expected) and back == expected
    assert back.kind.value == kind


def test_unsent_message_gets_the_wall_clock() -> None:
    assert decode_control(encode_control(Done("n", 0, 0))).sent_ms > 0


def test_unknown_kind_and_garbage_are_refused() -> None:
    raw = codec_for("control").encode(
        {"kind": "PLEASE", "node": "n", "partition": 0, "replica": 0, "stagger": True, "sent_ms": 1}
    )
    with pytest.raises(ValueError):
        decode_control(raw)
    with pytest.raises(DecodeError):
        decode_control(b"\xff\x01")


def test_heartbeat_round_trip() -> None:
    hb = Heartbeat("n1", 0, 1, NodeState.UPSTREAM_FAILURE, 99, epoch=3, pid=42, role="secondary", keeps={"out": 17})
    assert Heartbeat.decode(hb.encode()) == hb
    lagging = Heartbeat("n1", 0, 1, NodeState.STABLE, 99, epoch=3, pid=42, held=12, checkpoint_ms=1234)
    assert Heartbeat.decode(lagging.encode()) == lagging
    assert hb.as_dict()["state"] == "UPSTREAM_FAILURE" and hb.as_dict()["role"] == "secondary"
    assert replica_key("n1", 0, 1) == "n1/p0/r1"
