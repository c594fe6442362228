"""A node's plan holds what its replicas need from the spec, and the spec chooses the scheme per node."""

from __future__ import annotations

import pytest

from services.spec import Scheme, SpecError, parse_spec
from services.spec.plan import plan_node
from services.spec.policies import Policy, Reconciliation
from tests.unit.spec.test_spec import BASE, problems


def test_plan_of_a_replicated_node_reading_a_replicated_node() -> None:
    spec = parse_spec(BASE.replace("n1: {operators: [f]}", "n1: {operators: [f], replicas: 3}"))
    plan = plan_node(spec, "n2")
    assert [i.stream for i in plan.inputs] == ["b"]
    assert plan.inputs[0].upstream == "n1" and plan.inputs[0].topics == ("t.b.r0", "t.b.r1", "t.b.r2")
    assert [(o.stream, o.topics, o.key) for o in plan.outputs] == [("w", ("t.w.r0", "t.w.r1"), "key")]
    assert [o.name for o in plan.operators] == ["win"]
    assert plan.partitions == 2 and plan.replicas == 2
    assert plan.restart_topics == ("t.restart.n2.r0", "t.restart.n2.r1")
    assert plan.delay_s == pytest.approx(spec.node_delay_s("n2"))
    assert plan.scheme is Scheme.DPC and plan.reconciliation is Reconciliation.CHECKPOINT


def test_plan_of_a_source_reader() -> None:
    plan = plan_node(parse_spec(BASE), "n1")
    assert plan.inputs[0].upstream is None and plan.inputs[0].topics == ("t.a",)
    assert plan.fields["a"] == ["sensor", "ts", "value", "seq"] == plan.fields["b"]


def test_unknown_node_names_the_nodes() -> None:
    with pytest.raises(ValueError, match="no node 'x' in spec \\(nodes: n1, n2\\)"):
        plan_node(parse_spec(BASE), "x")


def test_scheme_and_policies_are_enums_read_from_the_spec() -> None:
    spec = parse_spec(
        BASE.replace("n2: {operators: [win], replicas: 2}", "n2: {operators: [win], replicas: 2, ha: dpc}")
        + "dpc: {reconciliation: undo, failure_policy: delay, stabilization_policy: suspend}\n"
    )
    assert spec.nodes["n2"].ha.scheme is Scheme.DPC
    assert spec.dpc.failure_policy is Policy.DELAY and spec.dpc.stabilization_policy is Policy.SUSPEND
    assert plan_node(spec, "n2").reconciliation is Reconciliation.UNDO


def test_unknown_scheme_is_reported_with_its_location() -> None:
    got = problems(BASE.replace("n2: {operators: [win], replicas: 2}", "n2: {operators: [win], ha: paxos}"))
    assert got == [
        "s.yaml:12:30: nodes.n2.ha: 'ha' must be one of dpc, amnesia, passive_standby, active_standby, "
        "upstream_backup, got 'paxos'"
    ], got


def test_renamed_restart_image_interval_says_its_new_name() -> None:
    got = problems(BASE + "dpc: {checkpoint_interval: 500}\n")
    assert any("dpc.checkpoint_interval" in p and "'restart_image_interval'" in p for p in got), got
    spec = parse_spec(BASE + "dpc: {restart_image_interval: 500}\n")
    assert spec.dpc.restart_image_interval == 500


def test_spec_error_is_a_value_error_of_the_project_hierarchy() -> None:
    from services.core.errors import HastreamError

    with pytest.raises(SpecError) as e:
        parse_spec("name: [", source="s.yaml")
    assert isinstance(e.value, HastreamError) and isinstance(e.value, ValueError)
