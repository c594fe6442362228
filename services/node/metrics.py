"""A node replica's Prometheus metrics, read from the counters it keeps anyway when Prometheus scrapes.

Nothing here runs per tuple: the collector reads ``NodeStats``, the outputs' and operators'
counts and the heartbeat sender when ``/metrics`` is asked for; the loop refreshes the
input lags once per check (every 100 ms) and reports each reconciliation once it ends.
Every sample carries the replica's ``spec``, ``node``, ``partition`` and ``replica``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from services.control.states import NodeState
from services.core.metrics import counter, counters, gauge, gauges

if TYPE_CHECKING:
    from services.node.loop import NodeService

# Why a message or tuple went to the dead-letter topic, as a label of few values: the first
# phrase of the reason that matches. The full reason stays in the record's ht.error header.
REASONS = (
    ("does not fit stream", "schema_mismatch"),
    ("missing", "missing_headers"),
    ("malformed header", "malformed_headers"),
    ("ht header", "malformed_headers"),
    ("unknown tuple type", "malformed_headers"),
    ("not valid avro", "invalid_avro"),
    ("empty message value", "invalid_avro"),
    ("jumps", "id_jump"),
    ("goes back", "id_jump"),
    ("boundary", "late"),
    ("late", "late"),
)
RECONCILIATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
LABELS = ("spec", "node", "partition", "replica")


def reason_label(reason: str, rejected: bool = False) -> str:
    """The label of a dead-letter reason; ``rejected``: an operator's rejection of a tuple, not bad input."""
    low = reason.lower()
    for phrase, label in REASONS:
        if phrase in low:
            return label
    return "operator_error" if rejected else "malformed_input"


class NodeMetrics(Collector):
    """The collector of one node replica partition; also times its reconciliations."""

    def __init__(self, node: NodeService) -> None:
        self.node = node
        plan = node.plan
        self.labels = {
            "spec": plan.spec_name,
            "node": plan.node,
            "partition": str(node.partition),
            "replica": str(node.replica),
        }
        self._durations = Histogram(
            "hastream_node_reconciliation_seconds",
            "How long reconciliations took: from STABILIZATION until the replica left it.",
            labelnames=LABELS,
            buckets=RECONCILIATION_BUCKETS,
            registry=None,
        )
        self.reconciliation = self._durations.labels(**self.labels)
        self._since: float | None = None  # when the running reconciliation began

    def state_changed(self, old: NodeState, new: NodeState, now: float | None = None) -> None:
        """Time reconciliations by the states the replica announces."""
        now = time.monotonic() if now is None else now
        if new is NodeState.STABILIZATION and old is not NodeState.STABILIZATION:
            self._since = now
        elif old is NodeState.STABILIZATION and new is not NodeState.STABILIZATION and self._since is not None:
            self.reconciliation.observe(now - self._since)
            self._since = None

    def collect(self) -> Iterator[Metric]:
        yield from self._flow()
        yield from self._dpc()
        yield from self._upkeep()
        yield from self._durations.collect()

    def _flow(self) -> Iterator[Metric]:
        """Tuples in, out, rejected, late; input lag."""
        n, lab = self.node, self.labels
        st = n.stats
        yield counter("hastream_node_consumed", "Input messages read (data and control tuples).", st.consumed, lab)
        yield counter("hastream_node_produced", "Messages written to the output topics.", n.outputs.produced, lab)
        yield counter("hastream_node_tentative", "Tentative tuples produced.", st.tentative, lab)
        reasons = dict(st.deadlettered_by)
        yield counters(
            "hastream_node_deadlettered",
            "Input messages and tuples sent to the dead-letter topic, by reason.",
            [({**lab, "reason": r}, v) for r, v in sorted(reasons.items())],
            (*LABELS, "reason"),
        )
        ops = [(op.name, getattr(op, "late", None)) for op in n.pipeline.operators]
        yield counters(
            "hastream_node_late",
            "Tuples an operator dropped as late (behind its window watermark).",
            [({**lab, "operator": name}, late) for name, late in ops if late is not None],
            (*LABELS, "operator"),
        )
        yield gauges(
            "hastream_node_input_lag",
            "Input messages in the log not read yet, per input stream (as of the last check).",
            [({**lab, "input": s}, v) for s, v in sorted(dict(n.lags).items())],
            (*LABELS, "input"),
        )
        skipped = dict(st.skipped)
        yield counters(
            "hastream_node_skipped",
            "Input tuples left out on purpose (from a fenced writer, stale after a switch, REC_DONE), by kind.",
            [({**lab, "kind": k}, v) for k, v in sorted(skipped.items())],
            (*LABELS, "kind"),
        )

    def _dpc(self) -> Iterator[Metric]:
        """State, reconciliations, replica switches."""
        n, lab = self.node, self.labels
        st = n.stats
        state = n.heartbeat.state if hasattr(n, "heartbeat") else NodeState.RECOVERING
        yield gauges(
            "hastream_node_state",
            "The replica's DPC state: 1 for the state it is in, 0 for the others.",
            [({**lab, "state": s.value}, float(s is state)) for s in NodeState],
            (*LABELS, "state"),
        )
        yield counter("hastream_node_reconciliations", "Reconciliations finished.", st.reconciliations, lab)
        yield counter("hastream_node_replays", "Reconciliations redone from the input logs.", st.replays, lab)
        yield counter("hastream_node_undos_received", "UNDO tuples received.", st.undos_received, lab)
        yield counter("hastream_node_switches", "Moves of an input to another upstream replica.", st.switches, lab)
        yield counter("hastream_node_gaps", "Stable ids that did not come in order and were read again.", st.gaps, lab)

    def _upkeep(self) -> Iterator[Metric]:
        """Restart images and heartbeats."""
        n, lab = self.node, self.labels
        st = n.stats
        yield counter("hastream_node_restart_images", "Restart images written.", st.restart_images, lab)
        yield gauge(
            "hastream_node_restart_image_bytes", "Size of the last restart image written.", st.restart_image_bytes, lab
        )
        hb = getattr(n, "heartbeat", None)
        age = hb.age() if hb is not None else None
        if age is not None:
            yield gauge("hastream_node_heartbeat_age_seconds", "Time since the last heartbeat was sent.", age, lab)
