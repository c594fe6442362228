"""Where a spec puts exchanges, the topics and plans they give, and the keyings it refuses in one line."""

from __future__ import annotations

import pytest

from services.core.errors import SpecError
from services.core.paths import REPO_ROOT
from services.spec import exchanges as x
from services.spec import load_spec, parse_spec
from services.spec.plan import plan_node
from services.spec.topics import all_topics

REKEY = (REPO_ROOT / "examples" / "rekey.yaml").read_text()


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse_spec(text, source="s.yaml")
    return e.value.problems


def test_an_edge_whose_key_or_partition_count_changes_gets_an_exchange() -> None:
    s = load_spec(REPO_ROOT / "examples" / "rekey.yaml")
    assert x.exchange_of(s, "readings") is None  # read by its own partitions, keyed by sensor
    assert x.exchange_of(s, "warm") == x.Exchange("warm", "building", "building", 2, 3)
    assert x.exchange_of(s, "in_building") == x.Exchange("in_building", "region", "region", 3, 4)
    assert x.exchange_of(s, "per_building") is None  # a sink
    assert s.stream_topics("warm") == ["rekey.warm.p0.r0", "rekey.warm.p0.r1", "rekey.warm.p1.r0", "rekey.warm.p1.r1"]
    assert ("rekey.warm.p1.r0", 3) in all_topics(s) and ("rekey.per_region.r1", 4) in all_topics(s)


def test_a_stream_is_split_by_what_its_operators_keep_of_their_nodes_key() -> None:
    s = load_spec(REPO_ROOT / "examples" / "rekey.yaml")
    assert x.split_by(s, "warm") == "sensor"  # declared key: sensor; a filter keeps its node's split
    assert x.split_by(s, "in_building") == "building"  # declared key region: not what it is split by
    assert x.split_by(s, "per_building") == "key"  # a window's results carry its key as ``key``


def test_same_partitions_and_key_need_no_exchange_but_another_key_does() -> None:
    same = REKEY.replace(
        "per_building: {schema: window_stat, key: key, partitions: 3}",
        "per_building: {schema: window_stat, key: key, partitions: 2}",
    )
    same = same.replace(
        "in_building: {schema: located, key: region, partitions: 3}",
        "in_building: {schema: located, key: region, partitions: 2}",
    )
    s = parse_spec(same)
    assert x.exchange_of(s, "warm") == x.Exchange("warm", "building", "building", 2, 2)  # 2 = 2, but sensor != building
    by_sensor = parse_spec(same.replace("output: per_building, key: building", "output: per_building, key: sensor"))
    assert x.exchange_of(by_sensor, "warm") is None


def test_the_plans_read_and_write_one_connection_per_partition_pair() -> None:
    s = load_spec(REPO_ROOT / "examples" / "rekey.yaml")
    sense, building = plan_node(s, "sense"), plan_node(s, "building")
    outs = [o for o in sense.outputs if o.operand == "warm"]
    assert [(o.stream, o.connection, o.route) for o in outs] == [
        ("warm->0", 0, "building"),
        ("warm->1", 1, "building"),
        ("warm->2", 2, "building"),
    ]
    assert {o.topic(1, 1) for o in outs} == {"rekey.warm.p1.r1"} and [o.kafka_partition(1) for o in outs] == [0, 1, 2]
    ins = [
        (i.stream, i.operand, i.topics, i.index, i.upstream_partition(2), i.route, i.fanout) for i in building.inputs
    ]
    assert ins == [
        ("warm/0", "warm", ("rekey.warm.p0.r0", "rekey.warm.p0.r1"), 0, 0, "building", 3),
        ("warm/1", "warm", ("rekey.warm.p1.r0", "rekey.warm.p1.r1"), 1, 1, "building", 3),
    ]
    assert not building.in_order  # its connections are merged by tuple time


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        (
            "readings: {schema: located, key: sensor, partitions: 2}",
            "readings: {schema: located, key: sensor, partitions: 3}",
            "source stream 'readings' has 3 partitions keyed by 'sensor', and node 'sense' needs 2 keyed by 'sensor'",
        ),
        (
            "in_building: {schema: located, key: region, partitions: 3}",
            "in_building: {schema: located, key: region, partitions: 5}",
            "outputs of node 'building' have different partition counts (per_building=3, in_building=5)",
        ),
        (
            "  warm: {schema: located, key: sensor, partitions: 2}",
            "  warm: {schema: located, key: sensor, partitions: 2, egress: {mode: stable}}",
            "stream 'warm' is split into connections for node 'building'",
        ),
    ],
)
def test_a_keying_no_exchange_can_give_is_one_line(old: str, new: str, says: str) -> None:
    assert old in REKEY
    found = problems(REKEY.replace(old, new, 1))
    assert any(says in p for p in found), found


def test_two_nodes_that_need_one_stream_split_differently_are_told_to_split_it() -> None:
    twice = REKEY.replace(
        "  keep: {type: filter, input: warm,",
        "  also: {type: window, input: warm, output: per_sensor, key: sensor, size: 400, slide: 200,\n"
        "         aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}\n  keep: {type: filter, input: warm,",
    ).replace("  per_region:", "  per_sensor: {schema: window_stat, key: key, partitions: 2}\n  per_region:")
    twice = twice.replace(
        "  region: {operators: [region_stats], replicas: 2}",
        "  region: {operators: [region_stats], replicas: 2}\n  sensors: {operators: [also]}",
    )
    found = problems(twice)
    assert any("nodes 'building' and 'sensors' need stream 'warm' partitioned differently" in p for p in found), found


def test_routing_to_several_partitions_needs_a_key() -> None:
    keyless = REKEY.replace(
        "in_building: {schema: located, key: region, partitions: 3}", "in_building: {schema: located, partitions: 3}"
    )
    s = parse_spec(keyless)  # the window's key routes it: the stream needs none
    assert x.exchange_of(s, "in_building") == x.Exchange("in_building", "region", "region", 3, 4)
    window = REKEY[REKEY.index("  region_stats:") : REKEY.index("nodes:")]
    stateless = keyless.replace(
        window, "  region_stats: {type: filter, input: in_building, output: per_region, where: 'value > 0'}\n"
    )
    stateless = stateless.replace("per_region: {schema: window_stat, key: key,", "per_region: {schema: located,")
    found = problems(stateless)
    assert any(
        "node 'region' reads stream 'in_building' in 4 partitions: give 'in_building' a 'key'" in p for p in found
    ), found


def test_validate_says_who_routes_what_to_whom_over_which_topics() -> None:
    s = load_spec(REPO_ROOT / "examples" / "rekey.yaml")
    assert [x.describe(s, ex) for ex in x.edges(s)] == [
        "exchange warm: sense (2 partitions) -> building (3 partitions) by CRC32 of 'building'; 6 connections, "
        "partition i of rekey.warm.p<j>.r<k> from producer partition j to i",
        "exchange in_building: building (3 partitions) -> region (4 partitions) by CRC32 of 'region'; 12 "
        "connections, partition i of rekey.in_building.p<j>.r<k> from producer partition j to i",
    ]


TIMED = """\
name: tm
streams:
  a: {schema: window_stat, key: key}
  r: {schema: reading, key: sensor}
  w: {schema: window_stat, key: key}
  both: {schema: window_stat, key: key}
operators:
  win: {type: window, input: r, output: w, key: sensor, size: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  merge: {type: union, inputs: [w, a], output: both}
nodes:
  n: {operators: [win, merge]}
"""


def test_a_union_of_what_a_window_emits_needs_operator_time_at_bucket_starts() -> None:
    """A window's results come as operator time moves: a union of them with another input interleaves
    alike on every replica only if time moves at the same points of the input (bucket starts)."""
    assert plan_node(parse_spec(TIMED), "n").timed_merge
    apart = TIMED.replace("  n: {operators: [win, merge]}", "  n: {operators: [win]}\n  m: {operators: [merge]}")
    assert not plan_node(parse_spec(apart), "n").timed_merge and not plan_node(parse_spec(apart), "m").timed_merge
    s = load_spec(REPO_ROOT / "examples" / "rekey.yaml")
    assert not any(plan_node(s, n).timed_merge for n in s.nodes)
