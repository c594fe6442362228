"""``egress:`` in the spec: the plain topics of a node's output, their defaults, and each mistake in one
line with its place in the file."""

from __future__ import annotations

from services.spec import parse_spec
from services.spec.egress import egress_topic
from services.spec.model import EgressDef
from tests.unit.spec.test_spec import problems

BASE = """\
name: s
defaults: {replicas: 2}
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
  c: {schema: reading, key: sensor}
operators:
  up: {type: filter, input: a, output: b, where: "True"}
  down: {type: filter, input: b, output: c, where: "True"}
nodes:
  n: {operators: [up, down]}
"""


def _with(stream: str, egress: str, text: str = BASE) -> str:
    line = f"  {stream}: {{schema: reading, key: sensor}}"
    assert line in text
    return text.replace(line, f"  {stream}: {{schema: reading, key: sensor, egress: {egress}}}")


def test_egress_true_is_a_stable_json_topic_per_stream() -> None:
    spec = parse_spec(_with("c", "true"))
    (e,) = spec.streams["c"].egress
    assert e == EgressDef("stable", "json", None, 100, replicas=2)
    assert egress_topic(spec, "c", e) == "s.c.stable"
    assert spec.streams["a"].egress == ()


def test_one_egress_per_mode_each_with_its_own_settings() -> None:
    spec = parse_spec(
        _with("c", "[{mode: stable, topic: c-out, format: avro}, {mode: latest, commit_ms: 50, replicas: 3}]")
    )
    stable, latest = spec.streams["c"].egress
    assert (egress_topic(spec, "c", stable), stable.format) == ("c-out", "avro")
    assert (egress_topic(spec, "c", latest), latest.commit_ms, latest.replicas) == ("s.c.latest", 50, 3)


def test_an_egress_on_an_input_or_a_stream_internal_to_its_node_is_refused() -> None:
    assert problems(_with("a", "true")) == [
        "s.yaml:4:45: streams.a.egress: stream 'a' is an input (no operator writes it): 'egress' goes on a stream "
        "a node writes"
    ]
    assert problems(_with("b", "true")) == [
        "s.yaml:5:45: streams.b.egress: stream 'b' is internal to node 'n' (never written to Kafka): put 'egress' "
        "on one of its outputs (c)"
    ]


def test_bad_settings_each_say_what_to_write() -> None:
    assert problems(_with("c", "{format: xml}")) == [
        "s.yaml:6:54: streams.c.egress.format: 'format' must be json or avro, got 'xml'"
    ]
    assert problems(_with("c", "{mode: newest}")) == [
        "s.yaml:6:52: streams.c.egress.mode: 'mode' must be stable or latest, got 'newest'"
    ]
    assert problems(_with("c", "{commit: 5}")) == [
        "s.yaml:6:54: streams.c.egress.commit: unknown key 'commit' (allowed: commit_ms, format, heartbeat_ms, mode, replicas, topic)"
    ]
    assert problems(_with("c", "[{mode: stable}, {}]")) == [
        "s.yaml:6:62: streams.c.egress.1.mode: a second 'stable' egress: one egress per mode"
    ]


def test_an_egress_topic_another_stream_or_egress_has_is_refused() -> None:
    taken = problems(_with("c", "{topic: s.a}"))
    assert taken == [
        "s.yaml:6:45: streams.c.egress: topic 's.a' is already stream 'a''s: give this egress a 'topic:' of its own"
    ]
    own = problems(_with("c", "{topic: s.deadletter}"))
    assert own == [
        "s.yaml:6:45: streams.c.egress: topic 's.deadletter' is already the deployment's own: give this egress a "
        "'topic:' of its own"
    ]
    two = BASE.replace("  n: {operators: [up, down]}", "  n: {operators: [up]}\n  m: {operators: [down]}")
    both = problems(_with("c", "{topic: out}", _with("b", "{topic: out}", two)))
    assert both == [
        "s.yaml:6:45: streams.c.egress: topic 'out' is already stream 'b''s stable egress's: give this egress a "
        "'topic:' of its own"
    ]
