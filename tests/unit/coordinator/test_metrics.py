"""The coordinator's /metrics carry the status page's numbers; a replica not heard from is STARTING."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest

from services.coordinator.metrics import CoordinatorMetrics, replica_counts
from services.core.metrics import registry_of
from services.dpc.consistency import Coordination


def status_of(c: Coordination, now: int, grants_sent: int) -> dict[str, Any]:
    st = c.status(now, [("n", 0, 0), ("n", 0, 1), ("n", 0, 2)])
    return {**st, "ready": True, "grants_sent": grants_sent, "replicas_by_state": replica_counts(st["replicas"])}


def test_replicas_by_state_grants_and_heartbeat_ages() -> None:
    c = Coordination({}, {}, 1000)
    c.on_heartbeat({"node": "n", "partition": 0, "replica": 0, "state": "STABLE", "sent_ms": 1, "pid": 1}, now=1000)
    c.on_heartbeat(
        {"node": "n", "partition": 0, "replica": 1, "state": "UPSTREAM_FAILURE", "sent_ms": 1, "pid": 2}, now=1200
    )
    text = generate_latest(registry_of(CoordinatorMetrics("chain", lambda: status_of(c, 1500, 7)))).decode()
    assert 'hastream_coordinator_replicas{spec="chain",state="STABLE"} 1.0' in text
    assert 'hastream_coordinator_replicas{spec="chain",state="UPSTREAM_FAILURE"} 1.0' in text
    assert 'hastream_coordinator_replicas{spec="chain",state="STARTING"} 1.0' in text  # r2: not heard from yet
    assert 'hastream_coordinator_replicas{spec="chain",state="FAILED"} 0.0' in text
    assert 'hastream_coordinator_grants_total{spec="chain"} 7.0' in text
    age = 'hastream_coordinator_heartbeat_age_seconds{node="n",partition="0",replica="0",spec="chain"} 0.5'
    assert age in text
    assert 'replica="2"' not in text.split("hastream_coordinator_heartbeat_age_seconds", 1)[1]  # no age: never heard


def test_ha_takeovers_vulnerable_partitions_and_trimmed_logs() -> None:
    c = Coordination({}, {}, 1000)
    st = {
        **status_of(c, 1500, 0),
        "takeovers_total": 3,
        "ha_partitions": [
            {"node": "a", "partition": 0, "live": 1, "takeover_s": 0.42},
            {"node": "a", "partition": 1, "live": 2, "takeover_s": None},
        ],
        "trimmed": {"chain.mid[0]": 1200},
    }
    text = generate_latest(registry_of(CoordinatorMetrics("chain", lambda: st))).decode()
    assert 'hastream_coordinator_takeovers_total{spec="chain"} 3.0' in text
    assert 'hastream_coordinator_vulnerable{node="a",partition="0",spec="chain"} 1.0' in text
    assert 'hastream_coordinator_vulnerable{node="a",partition="1",spec="chain"} 0.0' in text
    assert 'hastream_coordinator_takeover_seconds{node="a",partition="0",spec="chain"} 0.42' in text
    assert 'hastream_coordinator_takeover_seconds{node="a",partition="1"' not in text  # none yet
    assert 'hastream_coordinator_log_start{log="chain.mid[0]",spec="chain"} 1200.0' in text


def test_standby_lag_and_crash_loops() -> None:
    from services.control.messages import Heartbeat
    from services.control.states import NodeState
    from services.coordinator.health import Health

    h, c = Health(), Coordination({}, {}, 1000)

    def beat(replica: int, pid: int, role: str = "secondary", **kw: Any) -> Heartbeat:
        return Heartbeat("a", 0, replica, NodeState.STABLE, 0, 3, pid, role=role, **kw)

    h.heard(beat(0, 10, "primary"), 0.0)
    h.heard(beat(1, 20, held=340), 0.0)
    h.heard(beat(2, 30, checkpoint_ms=9_000), 0.0)
    warnings = [h.heard(beat(2, 31 + i, checkpoint_ms=9_000), 1.0 + i) for i in range(3)]
    assert warnings[:2] == [None, None] and warnings[2] is not None and "a p0 r2 is crash-looping" in warnings[2]
    assert h.heard(beat(2, 40, checkpoint_ms=9_000), 4.0) is None  # said once
    st = {
        **status_of(c, 1500, 0),
        "standby": h.standby(10_000),
        "crash_looping": [{"node": n, "partition": p, "replica": r} for n, p, r in h.looping(4.0)],
    }
    text = generate_latest(registry_of(CoordinatorMetrics("chain", lambda: st))).decode()
    assert 'hastream_coordinator_standby_held{node="a",partition="0",replica="1",spec="chain"} 340.0' in text
    lag = 'hastream_coordinator_standby_checkpoint_lag_seconds{node="a",partition="0",replica="2",spec="chain"} 1.0'
    assert lag in text
    assert 'hastream_coordinator_crash_looping{node="a",partition="0",replica="2",spec="chain"} 1.0' in text
    assert 'replica="0"' not in text.split("hastream_coordinator_standby_held", 1)[1].split("# HELP")[0]  # a primary
    assert h.looping(4.0 + 200) == []  # the restarts age out
