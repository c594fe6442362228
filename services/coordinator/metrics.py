"""The coordinator's Prometheus metrics, built from the same status the status page shows.

Collected when ``/metrics`` is asked for, on the coordinator's event loop (the web views run
there), so it reads its tables without racing the agents that write them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from services.control.states import NodeState
from services.core.metrics import counter, gauge, gauges
from services.dpc.consistency import STARTING

STATES = [STARTING] + [s.value for s in NodeState]


def replica_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many replicas are in each state (every state listed, 0 included)."""
    seen = Counter(r["state"] for r in rows)
    return {s: seen.get(s, 0) for s in STATES}


class CoordinatorMetrics(Collector):
    """Reads ``status()`` (the status page's numbers) at each scrape."""

    def __init__(self, spec: str, status: Callable[[], dict[str, Any]]) -> None:
        self.spec, self.status = spec, status

    def collect(self) -> Iterator[Metric]:
        st, lab = self.status(), {"spec": self.spec}
        yield gauge(
            "hastream_coordinator_ready", "1 once the tables are recovered and the backlog read.", st["ready"], lab
        )
        yield counter(
            "hastream_coordinator_grants", "GRANTs sent since this coordinator started.", st["grants_sent"], lab
        )
        yield gauge("hastream_coordinator_grants_held", "Reconciliation grants held now.", len(st["grants"]), lab)
        yield gauge("hastream_coordinator_requests_waiting", "REQUESTs waiting for a grant.", len(st["pending"]), lab)
        yield gauges(
            "hastream_coordinator_replicas",
            "Node replica partitions by state (STARTING: not heard from yet).",
            [({**lab, "state": s}, n) for s, n in st["replicas_by_state"].items()],
            ("spec", "state"),
        )
        yield from _ha(st, lab)
        rows = [r for r in st["replicas"] if r["age_ms"] is not None]
        yield gauges(
            "hastream_coordinator_heartbeat_age_seconds",
            "Time since each replica's newest heartbeat arrived.",
            [({**lab, **_replica(r)}, r["age_ms"] / 1000) for r in rows],
            ("spec", "node", "partition", "replica"),
        )
        yield gauges(
            "hastream_coordinator_replica_lag",
            "Input messages each replica had not processed, as its newest heartbeat said.",
            [({**lab, **_replica(r)}, r.get("lag", 0)) for r in rows],
            ("spec", "node", "partition", "replica"),
        )


def _replica(row: dict[str, Any]) -> dict[str, str]:
    return {"node": row["node"], "partition": str(row["partition"]), "replica": str(row["replica"])}


def _ha(st: dict[str, Any], lab: dict[str, str]) -> Iterator[Metric]:
    """The HA nodes' takeovers, the partitions one failure away from an outage, and the trimmed logs."""
    parts = st.get("ha_partitions", [])
    yield counter(
        "hastream_coordinator_takeovers",
        "Primaries replaced since this coordinator started.",
        st.get("takeovers_total", 0),
        lab,
    )
    where = ("spec", "node", "partition")
    yield gauges(
        "hastream_coordinator_vulnerable",
        "1 while an HA node partition has one live replica or none: a failure now is an outage.",
        [({**lab, "node": r["node"], "partition": str(r["partition"])}, int(r["live"] <= 1)) for r in parts],
        where,
    )
    yield gauges(
        "hastream_coordinator_takeover_seconds",
        "The last takeover: from the old primary's last heartbeat to the new primary caught up.",
        [
            ({**lab, "node": r["node"], "partition": str(r["partition"])}, r["takeover_s"])
            for r in parts
            if r["takeover_s"] is not None
        ],
        where,
    )
    replica = ("spec", "node", "partition", "replica")
    standby = st.get("standby", [])
    yield gauges(
        "hastream_coordinator_standby_held",
        "Results an active standby secondary holds that its primary's log does not have yet.",
        [({**lab, **_replica(r)}, r["held"]) for r in standby],
        replica,
    )
    yield gauges(
        "hastream_coordinator_standby_checkpoint_lag_seconds",
        "How old the checkpoint a passive standby secondary holds is.",
        [({**lab, **_replica(r)}, r["checkpoint_lag_s"]) for r in standby if r["checkpoint_lag_s"] is not None],
        replica,
    )
    yield gauges(
        "hastream_coordinator_crash_looping",
        "1 for a replica restarted 3 times or more in the last 2 minutes.",
        [({**lab, **_replica(r)}, 1) for r in st.get("crash_looping", [])],
        replica,
    )
    yield gauges(
        "hastream_coordinator_log_start",
        "Where each trimmed log starts now (its offset), after the coordinator's trims.",
        [({**lab, "log": log}, start) for log, start in st.get("trimmed", {}).items()],
        ("spec", "log"),
    )
