"""Control messages and heartbeats round-trip through their Avro form as typed values."""

from __future__ import annotations

import pytest

from services.control.messages import ControlKind, ControlMessage, Heartbeat, replica_key
from services.control.states import NodeState
from services.core.codec import codec_for
from services.core.errors import DecodeError


@pytest.mark.parametrize("kind", list(ControlKind))
def test_control_message_round_trip(kind: ControlKind) -> None:
    m = ControlMessage(kind, "n2", 1, 0, stagger=False, sent_ms=1234, round_ms=1200, role="primary", epoch=7)
    back = ControlMessage.decode(m.encode())
    assert back == m and back.kind is kind
    assert back.is_for("n2", 1, 0) and not back.is_for("n2", 1, 1)
    assert back.as_dict() == {
        "kind": kind.value,
        "node": "n2",
        "partition": 1,
        "replica": 0,
        "stagger": False,
        "sent_ms": 1234,
        "round_ms": 1200,
        "role": "primary",
        "epoch": 7,
    }


def test_unsent_message_gets_the_wall_clock() -> None:
    assert ControlMessage.decode(ControlMessage(ControlKind.DONE, "n", 0, 0).encode()).sent_ms > 0


def test_unknown_kind_and_garbage_are_refused() -> None:
    raw = codec_for("control").encode(
        {"kind": "PLEASE", "node": "n", "partition": 0, "replica": 0, "stagger": True, "sent_ms": 1}
    )
    with pytest.raises(ValueError):
        ControlMessage.decode(raw)
    with pytest.raises(DecodeError):
        ControlMessage.decode(b"\xff\x01")


def test_heartbeat_round_trip() -> None:
    hb = Heartbeat("n1", 0, 1, NodeState.UPSTREAM_FAILURE, 99, epoch=3, pid=42, role="secondary")
    assert Heartbeat.decode(hb.encode()) == hb
    assert hb.as_dict()["state"] == "UPSTREAM_FAILURE" and hb.as_dict()["role"] == "secondary"
    assert replica_key("n1", 0, 1) == "n1/p0/r1"
