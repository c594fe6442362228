"""Streaming operators (wired as a node pipeline) equal the batch reference evaluation."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.node.pipeline import NodePipeline
from services.operators.reference import canonical, evaluate
from services.operators.window import WindowAggregate, window_starts
from services.spec import parse_spec
from services.spec.plan import plan_node

SPEC = """\
name: ops
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
  hot: {schema: reading, key: sensor}
  scaled: {schema: reading, key: sensor}
  both: {schema: reading, key: sensor}
  tumbling: {schema: window_stat, key: key}
  sliding: {schema: window_stat, key: key}
  counted: {schema: window_stat, key: key}
  pairs: {schema: joined, key: key}
operators:
  keep_hot: {type: filter, input: a, output: hot, where: "value >= 3 and sensor != 'k3'"}
  scale: {type: map, input: hot, output: scaled, fields: {sensor: sensor, ts: ts, value: "value * 2 - 1", seq: seq}}
  merge: {type: union, inputs: [scaled, b], output: both}
  tumble: {type: window, input: scaled, output: tumbling, key: sensor, size: 20, aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  slide: {type: window, input: a, output: sliding, key: sensor, size: 30, slide: 10, aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  every3: {type: window, input: a, output: counted, key: sensor, count: 3, aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  near: {type: join, left: a, right: b, output: pairs, key: sensor, within: 7, fields: {key: left.sensor, ts: "max(left.ts, right.ts)", left_value: left.value, right_value: right.value}}
nodes:
  all: {operators: [keep_hot, scale, merge, tumble, slide, every3, near]}
"""
spec = parse_spec(SPEC)


@st.composite
def in_order_stream(draw: Any) -> list[dict]:
    """Readings with non-decreasing time, few keys, whole-number values (sums exact in any order)."""
    n = draw(st.integers(0, 60))
    ts, out = 0, []
    for i in range(n):
        ts += draw(st.integers(0, 6))
        out.append(
            {"sensor": f"k{draw(st.integers(0, 3))}", "ts": ts, "value": float(draw(st.integers(-5, 10))), "seq": i}
        )
    return out


def run_pipeline(a: list[dict], b: list[dict], order: list[bool], runs: bool) -> dict[str, list[tuple[dict, int]]]:
    """Feed a and b interleaved as ``order`` says (True = next of a), collect outputs with stime.

    With ``runs``, consecutive tuples of one input go in as one batch, as the node feeds them.
    """
    p = NodePipeline(plan_node(spec, "all"))
    feeds = {True: p.entry("a"), False: p.entry("b")}
    pending: list = []
    pending_side = True  # the input the pending tuples came from; read only once there are some
    ia = ib = 0
    for take_a in order + [True] * len(a) + [False] * len(b):
        if take_a and ia < len(a):
            item = (a[ia], a[ia]["ts"])
            ia += 1
        elif not take_a and ib < len(b):
            item = (b[ib], b[ib]["ts"])
            ib += 1
        else:
            continue
        if pending and (take_a != pending_side or not runs):
            feeds[pending_side](pending)
            pending = []
        pending.append(item)
        pending_side = take_a
    if pending:
        feeds[pending_side](pending)
    return p.drain()


@settings(max_examples=150, deadline=None)
@given(in_order_stream(), in_order_stream(), st.lists(st.booleans(), max_size=120), st.booleans())
def test_pipeline_equals_reference(a: list[dict], b: list[dict], order: list[bool], runs: bool) -> None:
    got = run_pipeline(a, b, order, runs)
    want = evaluate(spec, {"a": [a], "b": [b]})
    recs = {s: [r for r, _ in got.get(s, [])] for s in spec.node_outputs("all")}
    # Windows are deterministic in (start, key) order: compare as sequences.
    assert recs["sliding"] == want["sliding"][0]
    assert recs["tumbling"] == want["tumbling"][0]
    assert recs["counted"] == want["counted"][0]  # each key's runs of 3, in the order they fill
    # A union and a join emit in an order that depends on how their inputs interleave
    # (ordering across inputs is SUnion's job): compare their content.
    assert canonical(recs["both"]) == canonical(want["both"][0])
    assert canonical(recs["pairs"]) == canonical(want["pairs"][0])
    # Window results carry their end as tuple time; join results the later input's time.
    assert all(st_ == r["window_end"] for r, st_ in got.get("sliding", []))
    assert all(st_ == r["window_end"] for r, st_ in got.get("counted", []))  # its closing tuple's
    assert all(st_ == r["ts"] for r, st_ in got.get("pairs", []))


# The filter and the map alone in a node of their own.
FM = parse_spec(
    SPEC.replace(
        "nodes:\n  all: {operators: [keep_hot, scale, merge, tumble, slide, every3, near]}",
        "nodes:\n  fm: {operators: [keep_hot, scale]}\n  rest: {operators: [merge, tumble, slide, every3, near]}",
    )
)


@given(in_order_stream())
def test_filter_and_map_keep_order(a: list[dict]) -> None:
    p = NodePipeline(plan_node(FM, "fm"))
    feed = p.entry("a")
    feed([(r, r["ts"]) for r in a])
    got = [r for r, _ in p.drain().get("scaled", [])]
    assert got == evaluate(spec, {"a": [a], "b": [[]]})["scaled"][0]


@given(st.integers(0, 10_000), st.sampled_from([(10, 10), (30, 10), (20, 5), (6, 3)]))
def test_window_starts_cover_exactly_the_windows_containing_t(t: int, size_slide: tuple[int, int]) -> None:
    size, slide = size_slide
    starts = list(window_starts(t, size, slide))
    assert len(starts) == size // slide
    assert all(s % slide == 0 and s <= t < s + size for s in starts)


def test_late_tuple_does_not_change_closed_windows() -> None:
    p = NodePipeline(plan_node(spec, "all"))
    feed = p.entry("a")
    feed([({"sensor": "k0", "ts": ts, "value": 1.0, "seq": 0}, ts) for ts in (0, 5, 35)])
    closed = [r for r, _ in p.drain()["sliding"]]
    feed([({"sensor": "k0", "ts": 1, "value": 100.0, "seq": 0}, 1)])  # late: its windows are closed
    assert closed and all(r["max"] == 1.0 for r in closed)
    assert not p.drain().get("sliding")
    slide = next(o for o in p.operators if o.name == "slide")
    assert isinstance(slide, WindowAggregate)
    assert slide.late > 0
