"""A node's metrics are read from its counters at scrape time; dead-letter reasons become few labels."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from services.control.states import NodeState
from services.core.metrics import registry_of
from services.node.metrics import NodeMetrics, reason_label
from services.node.scheme import NodeStats


def test_dead_letter_reasons_map_to_few_labels() -> None:
    assert reason_label("missing ht header") == "missing_headers"
    assert reason_label("missing ht.id header") == "missing_headers"
    assert reason_label("ht header b'STABLE,1' has 2 fields, not TYPE,id,...") == "malformed_headers"
    assert reason_label("malformed header value in ht: invalid literal") == "malformed_headers"
    assert reason_label("unknown tuple type 'X' in ht.type") == "malformed_headers"
    assert reason_label("not valid Avro for schema 'reading': EOFError: ") == "invalid_avro"
    assert reason_label("malformed input: ValueError: tuple id 7 jumps past 3: the source skipped ids") == "id_jump"
    assert reason_label("malformed input: ValueError: stime 5 is below the input's boundary 9") == "late"
    assert reason_label("does not fit stream 'out': bad type", rejected=True) == "schema_mismatch"
    assert reason_label("ZeroDivisionError: division by zero", rejected=True) == "operator_error"
    assert reason_label("malformed input: KeyError: 'x'") == "malformed_input"


class FakeHeartbeat:
    state = NodeState.STABLE

    def age(self) -> float:
        return 0.25


def fake_node(stats: NodeStats) -> Any:
    plan = SimpleNamespace(spec_name="s", node="n1")
    window = SimpleNamespace(name="per_sensor", late=3)
    return SimpleNamespace(
        plan=plan,
        partition=1,
        replica=0,
        stats=stats,
        outputs=SimpleNamespace(produced=40),
        pipeline=SimpleNamespace(operators=[SimpleNamespace(name="keep"), window]),
        lags={"s1": 5, "s2": 0},
        heartbeat=FakeHeartbeat(),
    )


def scrape(metrics: NodeMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry_of(metrics)).decode()
    own = {"spec", "node", "partition", "replica"}
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in own))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_the_collector_reads_the_counters_when_scraped() -> None:
    stats = NodeStats(consumed=100, reconciliations=2, restart_images=3, restart_image_bytes=4096)
    stats.deadlettered_by.update({"invalid_avro": 2, "missing_headers": 1})
    m = NodeMetrics(fake_node(stats))
    got = scrape(m)
    assert got[("hastream_node_consumed_total", ())] == 100
    assert got[("hastream_node_produced_total", ())] == 40
    assert got[("hastream_node_deadlettered_total", (("reason", "invalid_avro"),))] == 2
    assert got[("hastream_node_late_total", (("operator", "per_sensor"),))] == 3
    assert ("hastream_node_late_total", (("operator", "keep"),)) not in got  # a filter has no lateness
    assert got[("hastream_node_input_lag", (("input", "s1"),))] == 5
    assert got[("hastream_node_state", (("state", "STABLE"),))] == 1
    assert got[("hastream_node_state", (("state", "FAILED"),))] == 0
    assert got[("hastream_node_restart_image_bytes", ())] == 4096
    assert got[("hastream_node_heartbeat_age_seconds", ())] == 0.25
    stats.consumed += 50  # no call on the data path: the next scrape reads the counter
    assert scrape(m)[("hastream_node_consumed_total", ())] == 150


def test_reconciliations_are_timed_from_stabilization_until_it_ends() -> None:
    m = NodeMetrics(fake_node(NodeStats()))
    m.state_changed(NodeState.STABLE, NodeState.UPSTREAM_FAILURE, now=10.0)
    m.state_changed(NodeState.UPSTREAM_FAILURE, NodeState.STABILIZATION, now=12.0)
    m.state_changed(NodeState.STABILIZATION, NodeState.STABLE, now=12.4)
    got = scrape(m)
    assert got[("hastream_node_reconciliation_seconds_count", ())] == 1
    assert abs(got[("hastream_node_reconciliation_seconds_sum", ())] - 0.4) < 1e-9
    assert got[("hastream_node_reconciliation_seconds_bucket", (("le", "0.5"),))] == 1
    assert got[("hastream_node_reconciliation_seconds_bucket", (("le", "0.25"),))] == 0


def test_every_service_registry_counts_the_kafka_clients_reports(monkeypatch: Any) -> None:
    """librdkafka's lines and errors are counted, not printed: the counts are scraped with the service's."""
    from collections import Counter

    from services.core import client_log as kafka

    monkeypatch.setattr(kafka, "RDKAFKA_LOG_LINES", Counter({"FAIL": 1200}))
    monkeypatch.setattr(kafka, "RDKAFKA_ERRORS", Counter({"_TRANSPORT": 7}))
    text = generate_latest(registry_of()).decode()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert got[("hastream_kafka_client_log_lines_total", (("facility", "FAIL"),))] == 1200
    assert got[("hastream_kafka_client_errors_total", (("error", "_TRANSPORT"),))] == 7
    kafka.RDKAFKA_ERRORS["_TRANSPORT"] += 1  # read at scrape time
    assert 'hastream_kafka_client_errors_total{error="_TRANSPORT"} 8.0' in generate_latest(registry_of()).decode()
