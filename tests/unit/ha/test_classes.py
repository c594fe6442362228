"""Operator classes (ICDE 2005, section 3.2) and the recovery each scheme yields for them (Table 2)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.spec import parse_spec
from services.spec.classes import PRECISE, OpClass, Outcome, describe, node_class, operator_class, outcome, table
from services.spec.model import HaDef, Merge, Recovery, Scheme, Spec
from services.spec.problems import Problems
from services.spec.validate import guarantees
from tests.unit.spec.test_spec import BASE, REPO, problems

R, C, D, A = OpClass.REPEATABLE, OpClass.CONVERGENT_CAPABLE, OpClass.DETERMINISTIC, OpClass.ARBITRARY

TWO_INPUTS = """\
name: t
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
  u: {schema: reading, key: sensor}
  j: {schema: reading, key: sensor}
operators:
  both: {type: union, inputs: [a, b], output: u}
  pairs: {type: join, left: a, right: b, output: j, key: sensor, right_key: sensor, within: 100,
          fields: {sensor: left.sensor, ts: left.ts, value: right.value, seq: left.seq}}
nodes:
  merge: {operators: [both]}
  join: {operators: [pairs]}
"""


def with_ha(spec: Spec, node: str, **kw: object) -> Spec:
    spec.nodes[node] = replace(spec.nodes[node], ha=HaDef(**kw))  # type: ignore[arg-type]
    return spec


def test_operators_take_the_papers_classes() -> None:
    spec = parse_spec(BASE)
    assert operator_class(spec.operators["f"]).cls is R  # one tuple per output
    assert operator_class(spec.operators["win"]).cls is C  # an aggregate, aligned on its slide
    two = parse_spec(TWO_INPUTS)
    assert operator_class(two.operators["pairs"]).cls is R
    assert operator_class(two.operators["both"]).cls is R


def test_a_node_takes_its_most_general_operators_class() -> None:
    spec = parse_spec(BASE.replace("n2: {operators: [win], replicas: 2}", "").replace("[f]", "[f, win]"))
    got = node_class(spec, "n1")
    assert got.cls is C and "window 'win'" in got.why


@pytest.mark.parametrize("node", ["merge", "join"])
def test_several_inputs_in_arrival_order_make_a_node_arbitrary_and_a_time_merge_keeps_its_operators_class(
    node: str,
) -> None:
    spec = with_ha(parse_spec(TWO_INPUTS), node, scheme=Scheme.PASSIVE_STANDBY)
    got = node_class(spec, node)
    assert got.cls is A and "arrival order" in got.why
    spec = with_ha(spec, node, scheme=Scheme.PASSIVE_STANDBY, merge=Merge.TIME)
    got = node_class(spec, node)
    assert got.cls is R and "tuple-time order" in got.why


def test_a_dpc_node_merges_in_sunion_so_its_inputs_do_not_make_it_arbitrary() -> None:
    assert node_class(parse_spec(TWO_INPUTS), "merge").cls is R


def test_table_2_rollback_outcomes() -> None:
    rp, cv, dv = Outcome.REPEATING, Outcome.CONVERGENT, Outcome.DIVERGENT
    ps, ub, as_ = Scheme.PASSIVE_STANDBY, Scheme.UPSTREAM_BACKUP, Scheme.ACTIVE_STANDBY
    want = {
        R: {ps: rp, ub: rp, as_: rp},
        C: {ps: rp, ub: cv, as_: rp},
        D: {ps: rp, ub: dv, as_: rp},
        A: {ps: dv, ub: dv, as_: dv},
    }
    for cls, row in want.items():
        assert table(cls) == row, cls
        for scheme, o in row.items():
            assert outcome(scheme, Recovery.ROLLBACK, cls) is o
        assert outcome(Scheme.AMNESIA, Recovery.GAP, cls) is Outcome.GAP


def test_precise_recovery_where_section_6_gives_it_and_a_reason_with_an_alternative_where_not() -> None:
    assert {s: [c for c in OpClass if outcome(s, Recovery.PRECISE, c) is Outcome.PRECISE] for s in PRECISE} == {
        Scheme.PASSIVE_STANDBY: [R, C, D, A],  # arbitrary: only checkpointed output goes downstream
        Scheme.ACTIVE_STANDBY: [R, C, D],
        Scheme.UPSTREAM_BACKUP: [R, C],  # watermarks identify regenerated tuples while the state converges
    }
    why = outcome(Scheme.UPSTREAM_BACKUP, Recovery.PRECISE, D)
    assert isinstance(why, str) and "deterministic" in why and "passive_standby" in why


def test_amnesia_gives_only_gap_and_the_others_no_gap() -> None:
    why = outcome(Scheme.AMNESIA, Recovery.PRECISE, R)
    assert isinstance(why, str) and "gap" in why and "passive_standby" in why
    why = outcome(Scheme.ACTIVE_STANDBY, Recovery.GAP, R)
    assert isinstance(why, str) and "amnesia" in why


def test_a_guarantee_the_class_and_scheme_cannot_give_is_one_located_line() -> None:
    spec = parse_spec(TWO_INPUTS)
    with_ha(spec, "merge", scheme=Scheme.UPSTREAM_BACKUP, recovery=Recovery.PRECISE)
    with_ha(spec, "join", scheme=Scheme.PASSIVE_STANDBY, recovery=Recovery.PRECISE)
    ck = Problems("s.yaml", {})
    guarantees(ck, spec)
    assert ck.problems == [
        "s.yaml: nodes.merge.ha: node 'merge' is arbitrary (it reads 2 inputs in arrival order (union-like)): "
        "upstream_backup cannot give precise recovery for an arbitrary node: use passive_standby, or "
        "active_standby for a deterministic node"
    ], ck.problems


def test_the_ha_mapping_is_read_with_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec(
        BASE.replace(
            "n2: {operators: [win], replicas: 2}",
            "n2: {operators: [win], replicas: 2, ha: {scheme: passive_standby, recovery: precise, interval_ms: 25}}",
        ).replace("n1: {operators: [f]}", "n1: {operators: [f], ha: amnesia}")
    )
    assert spec.nodes["n2"].ha == HaDef(Scheme.PASSIVE_STANDBY, Recovery.PRECISE, 25, 100, 3, Merge.ARRIVAL)
    assert spec.nodes["n1"].ha.guarantee is Recovery.GAP
    assert HaDef(Scheme.UPSTREAM_BACKUP).guarantee is Recovery.ROLLBACK


def test_ha_mistakes_are_one_line_each(monkeypatch: pytest.MonkeyPatch) -> None:
    node = "n2: {operators: [win], replicas: 2}"
    got = problems(BASE.replace(node, "n2: {operators: [win], ha: {recovery: fast, period: 3}}"))
    assert any("nodes.n2.ha: 'ha' needs a 'scheme'" in p for p in got), got
    assert any("nodes.n2.ha.recovery: 'recovery' must be one of precise, rollback, gap" in p for p in got), got
    assert any("nodes.n2.ha.period: unknown key 'period'" in p for p in got), got
    got = problems(BASE.replace(node, "n2: {operators: [win], ha: {scheme: dpc, interval_ms: 10}}"))
    assert any("'dpc:' section" in p for p in got), got
    got = problems(BASE.replace(node, "n2: {operators: [win], ha: {scheme: amnesia, recovery: precise}}"))
    assert got == [
        "s.yaml:12:30: nodes.n2.ha: node 'n2' is convergent-capable (window 'win' aggregates many tuples; its "
        "windows align on its slide): amnesia restarts empty and loses tuples, so it gives gap recovery, not "
        "precise: use passive_standby, active_standby or upstream_backup"
    ], got


def test_validate_describes_each_node() -> None:
    spec = with_ha(parse_spec(TWO_INPUTS), "merge", scheme=Scheme.ACTIVE_STANDBY)
    line = describe(spec, "merge")
    assert line.startswith("merge: arbitrary, as it reads 2 inputs in arrival order")
    assert "Scheme active_standby, rollback recovery: divergent." in line
    assert "precise: passive_standby;" in line
    assert describe(spec, "join").startswith("join: repeatable, as join 'pairs'")


def test_hastream_validate_prints_each_nodes_class() -> None:
    from typer.testing import CliRunner

    from services.cli.main import app

    res = CliRunner().invoke(app, ["validate", str(REPO / "examples" / "chain.yaml")], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any(line.strip().startswith("n3: convergent-capable, as window 'per_sensor'") for line in lines), lines
    assert any("merge in tuple-time order" in line for line in lines), lines


def test_the_logs_ha_schemes_recover_from_keep_every_record_until_trimmed() -> None:
    from services.deploy.topics import topic_specs

    spec = with_ha(parse_spec(BASE), "n2", scheme=Scheme.UPSTREAM_BACKUP)
    got = {t.name: t.config for t in topic_specs(spec)}
    for topic in ("t.b.r0", "t.w"):  # n2's input log, and its output: one log its primary writes
        assert got[topic]["retention.ms"] == "-1" and got[topic]["retention.bytes"] == "-1", topic
    assert "t.w.r0" not in got and "t.w.r1" not in got
    assert "retention.ms" not in got["t.a"]  # read by n1 only, a dpc node
