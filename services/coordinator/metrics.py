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
