"""The spec loader accepts good specs and reports every mistake with its location."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.spec import SpecError, load_spec, parse_spec
from services.spec.topics import all_topics

REPO = Path(__file__).resolve().parents[3]

BASE = """\
name: t
streams:
  a: {schema: reading, key: sensor, partitions: 2}
  b: {schema: reading, key: sensor, partitions: 2}
  w: {schema: window_stat, key: key, partitions: 2}
operators:
  f: {type: filter, input: a, output: b, where: "value > 1"}
  win: {type: window, input: b, output: w, key: sensor, size: 10, slide: 5,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n1: {operators: [f]}
  n2: {operators: [win], replicas: 2}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse_spec(text, source="s.yaml")
    return e.value.problems


def test_examples_are_valid() -> None:
    for f in sorted((REPO / "examples").glob("*.yaml")):
        load_spec(f)


def test_derived_topology() -> None:
    s = parse_spec(BASE)
    assert s.sources() == ["a"] and s.sinks() == ["w"]
    assert s.topo_nodes() == ["n1", "n2"]
    assert s.node_inputs("n2") == ["b"] and s.node_outputs("n1") == ["b"]
    assert s.stream_topics("w") == ["t.w.r0", "t.w.r1"]
    assert s.topic("a") == "t.a"
    assert ("t.deadletter", 1) in all_topics(s)


def test_topics_are_the_deployments_unless_a_source_names_a_shared_one() -> None:
    """Two specs with the same stream names never share a topic; a source may read an existing
    topic by name (``topic:``), and an ingress stream's ``topic:`` is the raw topic outside clients write."""
    mine, theirs = parse_spec(BASE), parse_spec(BASE.replace("name: t", "name: u"))
    assert not {t for t, _ in all_topics(mine)} & {t for t, _ in all_topics(theirs)}
    shared = BASE.replace("a: {schema: reading,", "a: {topic: plant.readings, schema: reading,")
    assert (
        parse_spec(shared).topic("a") == parse_spec(shared.replace("name: t", "name: u")).topic("a") == "plant.readings"
    )
    fed = parse_spec(BASE.replace("a: {schema: reading,", "a: {topic: plant.raw, ingress: {}, schema: reading,"))
    assert fed.topic("a.raw") == "plant.raw" and fed.stream_topics("a") == ["t.a.r0"]
    twice = BASE.replace("a: {schema: reading,", "a: {topic: x, schema: reading,").replace(
        "  w: {schema", "  c: {schema: reading, topic: x}\n  w: {schema"
    )
    assert any("topic 'x' is already stream 'a''s" in p for p in problems(twice))


def test_internal_stream_is_not_materialized() -> None:
    s = parse_spec(
        BASE.replace("n1: {operators: [f]}\n  n2: {operators: [win], replicas: 2}", "n1: {operators: [f, win]}")
    )
    assert s.stream_topics("b") == []
    assert s.node_outputs("n1") == ["w"]


@pytest.mark.parametrize(
    "old,new,line,message",
    [
        ("input: a, output: b", "input: nope, output: b", 7, "unknown stream 'nope'"),
        ('where: "value > 1"', 'where: "valu > 1"', 7, "unknown field 'valu'"),
        ('where: "value > 1"', 'where: "__import__(1)"', 7, "only calls to"),
        ("size: 10, slide: 5", "size: 10, slide: 3", 8, "multiple of slide"),
        ("sum: sum(value)", "sum: total(value)", 9, "must be one of count"),
        ("replicas: 2", "replicas: 0", 12, "'replicas' must be an integer >= 1"),
        ("operators: [f]}", "operators: [g]}", 11, "unknown operator 'g'"),
        ("schema: window_stat", "schema: nosuch", 5, "no schema 'nosuch'"),
        ("key: sensor, partitions: 2}\n  b", "key: sensr, partitions: 2}\n  b", 3, "key field 'sensr'"),
        ("type: filter", "type: filtre", 7, "'type' must be one of"),
        (
            "  b: {schema: reading, key: sensor, partitions: 2}",
            "  b: {schema: reading, key: sensor, partitions: 3}",
            3,
            "source stream 'a' has 2 partitions keyed by 'sensor', and node 'n1' needs 3",
        ),
        ("a: {schema: reading,", "a: {topic: 'no/slash', schema: reading,", 3, "'topic' must be a Kafka topic name"),
        ("b: {schema: reading,", "b: {topic: plant.b, schema: reading,", 4, "stream 'b' is written by operator 'f'"),
        ("  a: {schema", "  control: {schema: reading}\n  a: {schema", 3, "stream name 'control' is taken"),
    ],
)
def test_mistake_reported_with_location(old: str, new: str, line: int, message: str) -> None:
    assert old in BASE
    found = problems(BASE.replace(old, new, 1))
    assert any(message in p for p in found), found
    hit = next(p for p in found if message in p)
    m = re.match(r"s\.yaml:(\d+):(\d+): ", hit)
    assert m, hit
    assert int(m.group(1)) == line, hit


def test_every_mistake_is_reported_at_once() -> None:
    text = BASE.replace("input: a, output: b", "input: nope, output: b").replace("replicas: 2", "replicas: -1")
    found = problems(text)
    assert len(found) >= 2
    assert all(p.count("\n") == 0 for p in found)


def test_partitioned_window_must_be_keyed_by_the_key_its_node_splits_by() -> None:
    """A window reading a stream inside its node gets the node's partitioning, not an exchange."""
    inside = BASE.replace("n1: {operators: [f]}\n  n2: {operators: [win], replicas: 2}", "n1: {operators: [f, win]}")
    found = problems(inside.replace("output: w, key: sensor", "output: w, key: seq", 1))
    assert any("must be keyed by 'seq'" in p and "split by 'sensor'" in p for p in found), found


def test_cycle_is_reported() -> None:
    text = """\
name: c
streams:
  a: {schema: reading}
  b: {schema: reading}
operators:
  f: {type: filter, input: a, output: b, where: "True"}
  g: {type: filter, input: b, output: a, where: "True"}
nodes:
  n: {operators: [f, g]}
"""
    assert any("cycle" in p for p in problems(text))


def test_not_yaml_and_missing_file() -> None:
    assert "not valid YAML" in problems("streams: [")[0]
    with pytest.raises(SpecError, match="no such file"):
        load_spec("/nonexistent/spec.yaml")


def test_delay_bound_is_split_across_the_longest_path_and_per_output() -> None:
    spec = parse_spec(BASE.replace("name: t", "name: t\ndpc: {delay: 4000, alpha: 0.5}"))
    # Under "process" only the first node of a path to miss an input waits: each may spend alpha * X.
    assert spec.node_delay_s("n1") == pytest.approx(0.5 * 4000 / 1000)
    assert spec.node_delay_s("n2") == pytest.approx(2.0)
    # A node that delays new tuples holds them in turn with every node of the path: w is reached
    # through n1 then n2, so each holds alpha of half of X.
    assert spec.node_hold_s("n1") == pytest.approx(0.5 * 4000 / 2 / 1000)
    assert spec.node_hold_s("n2") == pytest.approx(1.0)
    delay = parse_spec(BASE.replace("name: t", "name: t\ndpc: {delay: 4000, alpha: 0.5, failure_policy: delay}"))
    assert delay.node_delay_s("n1") == pytest.approx(1.0), "under 'delay' every node of the path waits in turn"
    tight = parse_spec(
        BASE.replace(
            "w: {schema: window_stat, key: key, partitions: 2}",
            "w: {schema: window_stat, key: key, partitions: 2, delay: 1000}",
        )
    )
    assert tight.node_delay_s("n1") == pytest.approx(0.9 * 1000 / 1000), "the output's own X wins"
    assert tight.node_hold_s("n1") == pytest.approx(0.9 * 1000 / 2 / 1000)


def test_dpc_settings_are_checked_with_their_location() -> None:
    bad = BASE.replace("name: t", "name: t\ndpc: {alpha: 2, reconciliation: magic, failure_policy: wait}")
    bad = bad.replace("n1: {operators: [f]}", "n1: {operators: [f], reconciliation: redo}")
    got = problems(bad)
    assert any(re.match(r"s\.yaml:2:\d+: dpc\.alpha: 'alpha' must be a number in \(0, 1\]", p) for p in got), got
    assert any("dpc.reconciliation" in p and "checkpoint, undo" in p for p in got), got
    assert any("dpc.failure_policy" in p and "process, delay" in p for p in got), got
    assert any("nodes.n1.reconciliation" in p for p in got), got
    ok = parse_spec(BASE.replace("n1: {operators: [f]}", "n1: {operators: [f], reconciliation: undo}"))
    assert ok.reconciliation_of("n1") == "undo" and ok.reconciliation_of("n2") == "checkpoint"


USER_SCHEMA = """\
name: shop
schemas: {dir}
streams:
  orders: {{schema: {name}, key: customer}}
  big: {{schema: {name}, key: customer}}
operators:
  big: {{type: filter, input: orders, output: big, where: "amount >= 50"}}
nodes:
  picker: {{operators: [big]}}
"""


def _order(name: str, amount: str = "double") -> str:
    fields = [
        {"name": "customer", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "amount", "type": amount},
    ]
    import json

    return json.dumps({"type": "record", "name": name, "fields": fields})


def test_a_spec_finds_its_own_schemas_relative_to_its_file(tmp_path: Path) -> None:
    from services.core.codec import codec_for, schema_header

    (tmp_path / "sch").mkdir()
    (tmp_path / "sch" / "order_rel.avsc").write_text(_order("OrderRel"))
    path = tmp_path / "spec.yaml"
    path.write_text(USER_SCHEMA.format(dir="sch", name="order_rel"))
    spec = load_spec(path)
    assert spec.schemas == (tmp_path / "sch").resolve()
    rec = {"customer": "c1", "ts": 5, "amount": 60.0}
    assert codec_for("order_rel").decode(codec_for("order_rel").encode(rec)) == rec
    assert re.fullmatch(rb"order_rel:[0-9a-f]{16}", schema_header("order_rel"))


def test_schema_directory_mistakes_are_reported_with_their_location(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(USER_SCHEMA.format(dir="missing", name="order_x"))
    with pytest.raises(SpecError, match=r"spec.yaml:2:10: schemas: no such directory: .*missing"):
        load_spec(path)
    (tmp_path / "clash").mkdir()
    (tmp_path / "clash" / "reading.avsc").write_text(_order("Reading"))  # hastream's own name, other fields
    path.write_text(USER_SCHEMA.format(dir="clash", name="reading"))
    with pytest.raises(
        SpecError, match=r"schema 'reading' in .*clash/reading.avsc differs from .*schemas/reading.avsc"
    ):
        load_spec(path)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "order_broken.avsc").write_text('{"type": "record", "name": "B", "fields": [{"name": "x"}]}')
    path.write_text(USER_SCHEMA.format(dir="broken", name="order_broken"))
    with pytest.raises(SpecError, match=r"streams.orders.schema: .*order_broken.avsc: not an Avro schema"):
        load_spec(path)


def test_spark_node_settings() -> None:
    """A spark node reconciles by checkpoint/redo whatever the spec's default, and only it takes flush_ms."""
    spark = BASE.replace("n2: {operators: [win], replicas: 2}", "n2: {operators: [win], replicas: 2, engine: spark}")
    undo_default = parse_spec(spark.replace("name: t", "name: t\ndpc: {reconciliation: undo}"))
    assert undo_default.reconciliation_of("n2") == "checkpoint" and undo_default.reconciliation_of("n1") == "undo"
    assert parse_spec(spark.replace("engine: spark", "engine: spark, flush_ms: 250")).nodes["n2"].flush_ms == 250
    got = problems(spark.replace("engine: spark", "engine: spark, reconciliation: undo"))
    assert any("nodes.n2.reconciliation" in p and "checkpoint/redo" in p for p in got), got
    got = problems(BASE.replace("n1: {operators: [f]}", "n1: {operators: [f], flush_ms: 100}"))
    assert any("nodes.n1.flush_ms" in p and "spark nodes" in p for p in got), got
    got = problems(spark.replace("engine: spark", "engine: spark, flush_ms: 0"))
    assert any("nodes.n2.flush_ms" in p for p in got), got
    got = problems(spark.replace("engine: spark", "engine: spark, ha: {scheme: passive_standby}"))
    assert any("nodes.n2.ha: a spark node recovers by dpc only" in p for p in got), got


COUNTED = BASE.replace("size: 10, slide: 5,", "count: 3,")


def test_a_count_window_closes_by_count() -> None:
    op = parse_spec(COUNTED).operators["win"]
    assert (op.count, op.size, op.slide) == (3, 0, 0)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("count: 0,", "'count' must be an integer >= 1, got 0"),
        ("count: 3, size: 10,", "a window with 'count' closes by count, not by time: remove 'size'"),
        ("count: 3, slide: 5,", "a window with 'count' closes by count, not by time: remove 'slide'"),
    ],
)
def test_a_count_window_is_counted_only(change: str, said: str) -> None:
    got = problems(COUNTED.replace("count: 3,", change))
    assert any(said in p for p in got), got


def test_a_count_window_refuses_what_cannot_rebuild_it() -> None:
    """Undo/redo and the Spark engine each get one line saying what to use instead."""
    undo = COUNTED.replace(
        "n2: {operators: [win], replicas: 2}", "n2: {operators: [win], replicas: 2, reconciliation: undo}"
    )
    assert problems(undo) == [
        "s.yaml:12:55: nodes.n2.reconciliation: node 'n2' reconciles by undo/redo, which cannot rebuild count window "
        "'win' (counted from its oldest open window, the windows would not realign): use reconciliation: checkpoint"
    ]
    spark = COUNTED.replace("n2: {operators: [win], replicas: 2}", "n2: {operators: [win], engine: spark}")
    assert any("a count window runs on engine: python" in p for p in problems(spark))
