"""Operator classes (ICDE 2005, section 3.2) and the recovery each scheme yields for them (Table 2)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

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


def test_a_dpc_node_merges_in_sunion_so_its_inputs_do_not_make_it_arbitrary() -> None:
    assert node_class(parse_spec(TWO_INPUTS), "merge").cls is R


def test_table_2_rollback_outcomes_or_better_where_hastream_does_better() -> None:
    rp, dv = Outcome.REPEATING, Outcome.DIVERGENT
    ps, ub, as_ = Scheme.PASSIVE_STANDBY, Scheme.UPSTREAM_BACKUP, Scheme.ACTIVE_STANDBY
    want = {
        R: {ps: rp, ub: rp, as_: rp},
        C: {ps: rp, ub: rp, as_: rp},  # Table 2: UB convergent; hastream's cut realigns the rebuilt windows
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
        Scheme.PASSIVE_STANDBY: [R, C, D],  # the paper's forwarding of checkpointed output only is not here
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
    with_ha(spec, "merge", scheme=Scheme.UPSTREAM_BACKUP, recovery=Recovery.GAP)
    with_ha(spec, "join", scheme=Scheme.PASSIVE_STANDBY, recovery=Recovery.PRECISE)
    ck = Problems("s.yaml", {})
    guarantees(ck, spec)
    assert ck.problems == [
        "s.yaml: nodes.merge.ha: node 'merge' is repeatable (union 'both' forwards each tuple, and its 2 inputs "
        "merge in tuple-time order): upstream_backup keeps every tuple a recovery needs, so it gives rollback or "
        "precise: for gap use amnesia"
    ], ck.problems


def test_the_ha_mapping_is_read_with_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec(
        BASE.replace(
            "n2: {operators: [win], replicas: 2}",
            "n2: {operators: [win], replicas: 2, ha: {scheme: passive_standby, recovery: precise, interval_ms: 25}}",
        ).replace("n1: {operators: [f]}", "n1: {operators: [f], ha: amnesia}")
    )
    assert spec.nodes["n2"].ha == HaDef(Scheme.PASSIVE_STANDBY, Recovery.PRECISE, 25, 100, 3, Merge.TIME)
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
    assert line.startswith("merge: repeatable, as union 'both' forwards each tuple, and its 2 inputs merge in")
    assert "Scheme active_standby, rollback recovery: repeating." in line
    assert "precise: passive_standby, upstream_backup, active_standby;" in line
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


# D7: the class is the one hastream executes. A node's inputs always merge in tuple-time order (SUnion), so
# ``merge: arrival`` is refused, and several inputs never make a node arbitrary.
HA_TWO_INPUTS = TWO_INPUTS.replace("{operators: [both]}", "{operators: [both], ha: {scheme: upstream_backup}}")


@pytest.mark.parametrize("scheme", ["passive_standby", "active_standby", "upstream_backup", "amnesia"])
@pytest.mark.parametrize("node", ["merge", "join"])
def test_several_inputs_merge_in_tuple_time_order_so_the_node_keeps_its_operators_class(node: str, scheme: str) -> None:
    spec = parse_spec(TWO_INPUTS.replace(f"{node}: {{operators: [", f"{node}: {{ha: {scheme}, operators: ["))
    got = node_class(spec, node)
    assert got.cls is R and "2 inputs merge in tuple-time order" in got.why, got


@pytest.mark.parametrize("scheme", ["upstream_backup", "active_standby", "passive_standby"])
def test_precise_recovery_of_a_node_with_several_inputs_validates(scheme: str) -> None:
    spec = parse_spec(HA_TWO_INPUTS.replace("{scheme: upstream_backup}", f"{{scheme: {scheme}, recovery: precise}}"))
    assert spec.nodes["merge"].ha.guarantee is Recovery.PRECISE


def test_merge_arrival_is_refused_with_one_line_saying_what_to_write() -> None:
    got = problems(HA_TWO_INPUTS.replace("scheme: upstream_backup", "scheme: upstream_backup, merge: arrival"))
    assert got == [
        "s.yaml:12:67: nodes.merge.ha.merge: node 'merge': merge: arrival is not run by hastream (a node's inputs "
        "are merged in tuple-time order, which keeps its replicas identical): remove it or write merge: time"
    ], got


def test_merge_time_is_the_default_and_may_be_written() -> None:
    spec = parse_spec(HA_TWO_INPUTS.replace("scheme: upstream_backup", "scheme: upstream_backup, merge: time"))
    assert spec.nodes["merge"].ha == HaDef(Scheme.UPSTREAM_BACKUP) and HaDef().merge is Merge.TIME


_NOT_REACHED = re.compile(r"\b(divergent|convergent)\b(?!-capable)")  # hastream's rollbacks are all repeating


@pytest.mark.parametrize("scheme", list(Scheme))
def test_validate_prints_no_outcome_a_node_cannot_reach(scheme: Scheme) -> None:
    for text, node in ((TWO_INPUTS, "merge"), (TWO_INPUTS, "join"), (BASE, "n2"), (BASE, "n1")):
        spec = with_ha(parse_spec(text), node, scheme=scheme)
        line = describe(spec, node)
        assert not _NOT_REACHED.search(line), line
        assert "arbitrary" not in line and "arrival" not in line, line


def test_no_scheme_claims_precise_recovery_of_an_arbitrary_node() -> None:
    """Passive standby's precise recovery drops what it regenerates against the log, which needs a
    deterministic node; the paper's forwarding of checkpointed output only is not implemented."""
    for s in PRECISE:
        assert isinstance(outcome(s, Recovery.PRECISE, A), str), s
    why = outcome(Scheme.PASSIVE_STANDBY, Recovery.PRECISE, A)
    assert isinstance(why, str) and "checkpointed" not in why, why


def test_hastream_validate_refuses_merge_arrival_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from services.cli.main import app

    spec = tmp_path / "s.yaml"
    spec.write_text(HA_TWO_INPUTS.replace("scheme: upstream_backup", "scheme: upstream_backup, merge: arrival"))
    res = CliRunner().invoke(app, ["validate", str(spec)], env={"COLUMNS": "400"})
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1 and "write merge: time" in res.output, res.output
