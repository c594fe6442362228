"""Time advance, checkpoint/redo and undo/redo of a node pipeline (Borealis DPC reconciliation).

Inputs are what SUnion feeds a node: tuples in non-decreasing stime across all inputs,
in runs of one input, with ``advance(t)`` (t at most the next tuple's stime) in between.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from services.node.pipeline import NodePipeline
from services.operators.window import WindowAggregate
from services.spec import Spec, parse_spec
from services.spec.plan import plan_node
from tests.unit.operators.test_operators import SPEC

# test_operators' operators plus windows over a join's and a window's output, which only
# give the same output with and without advance() if the pipeline advances in topological order.
CHAINED = SPEC.replace(
    "operators:\n",
    """\
  pairstats: {schema: window_stat, key: key}
  rolled: {schema: window_stat, key: key}
operators:
  pairwin: {type: window, input: pairs, output: pairstats, key: key, size: 15, slide: 5, aggregates: {count: count, sum: sum(left_value), avg: avg(right_value), min: min(left_value), max: max(right_value)}}
  rollup: {type: window, input: sliding, output: rolled, key: key, time: window_end, size: 40, aggregates: {count: count, sum: sum(sum), avg: avg(avg), min: min(min), max: max(max)}}
""",
    1,
)
NODES_ALL = "nodes:\n  all: {operators: [keep_hot, scale, merge, tumble, slide, every3, near]}"
# The same operators as one node, and split as a pipeline of nodes would run them.
ALL = parse_spec(
    CHAINED.replace(
        NODES_ALL,
        "nodes:\n  all: {operators: [keep_hot, scale, merge, tumble, slide, near, pairwin, rollup]}\n"
        "  cnt: {operators: [every3]}",
    )
)
SPLIT = parse_spec(
    CHAINED.replace(
        NODES_ALL,
        (
            "nodes:\n  fm: {operators: [keep_hot, scale]}\n  agg: {operators: [tumble, slide, rollup]}\n  cnt: {operators: [every3]}\n"
            "  pair: {operators: [near, pairwin]}\n  mix: {operators: [merge]}"
        ),
    )
)
ORIG = parse_spec(
    SPEC.replace(
        NODES_ALL,
        "nodes:\n  all: {operators: [keep_hot, scale, merge, tumble, slide, near]}\n  cnt: {operators: [every3]}",
    )
)
# ha-review D8: a window and a join whose time field runs a minute ahead of the stream time (stime).
SHIFTED = parse_spec("""\
name: shifted
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
  sa: {schema: reading, key: sensor}
  sb: {schema: reading, key: sensor}
  sliding: {schema: window_stat, key: key}
  pairs: {schema: joined, key: key}
operators:
  shift_a: {type: map, input: a, output: sa, fields: {sensor: sensor, ts: "ts + 60000", value: value, seq: seq}}
  shift_b: {type: map, input: b, output: sb, fields: {sensor: sensor, ts: "ts + 60000", value: value, seq: seq}}
  slide: {type: window, input: sa, output: sliding, key: sensor, size: 30, slide: 10, aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  near: {type: join, left: sa, right: sb, output: pairs, key: sensor, within: 7, fields: {key: left.sensor, ts: "max(left.ts, right.ts)", left_value: left.value, right_value: right.value}}
nodes:
  all: {operators: [shift_a, shift_b, slide, near]}
""")
NODES = [(ORIG, "all"), (ALL, "all"), (SPLIT, "agg"), (SPLIT, "pair"), (SPLIT, "fm"), (SHIFTED, "all")]
# A count window reconciles by checkpoint/redo only (validation refuses undo for it).
COUNTED = [(SPLIT, "cnt")]
BIG = 10**9

# A feed plan: (stream, batch) steps and (None, t) for advance(t).
Step = tuple[Any, Any]


@st.composite
def plans(
    draw: Any, streams: list[str], start: int = 0, advances: bool = True, max_size: int = 40
) -> tuple[list[Step], int]:
    """Readings in non-decreasing stime from ``start`` on, batched in runs; returns the last stime too."""
    steps: list[Step] = []
    ts = start
    for i in range(draw(st.integers(0, max_size))):
        ts += draw(st.integers(0, 6))
        if advances and draw(st.integers(0, 3)) == 0:
            steps.append((None, draw(st.integers(max(0, ts - 25), ts))))
        s = draw(st.sampled_from(streams))
        rec = {"sensor": f"k{draw(st.integers(0, 3))}", "ts": ts, "value": float(draw(st.integers(-5, 10))), "seq": i}
        if steps and steps[-1][0] == s and draw(st.booleans()):
            steps[-1][1].append((rec, ts))
        else:
            steps.append((s, [(rec, ts)]))
    return steps, ts


def feed(p: NodePipeline, steps: list[Step]) -> dict[str, list]:
    """Run ``steps`` (fresh batch lists each time: pipelines keep them) and drain."""
    entries = {s: p.entry(s) for s in p.inputs}
    for s, x in steps:
        if s is None:
            p.advance(x)
        else:
            entries[s](list(x))
    return p.drain()


def finish(p: NodePipeline) -> dict[str, list]:
    p.advance(BIG)
    return p.drain()


def merged(*outs: dict[str, list]) -> dict[str, list]:
    m: dict[str, list] = {}
    for o in outs:
        for s, items in o.items():
            m.setdefault(s, []).extend(items)
    return m


def set_trim(p: NodePipeline, every: int) -> NodePipeline:
    for lg in p.logs or ():
        lg.trim_every = every
    return p


# -- 1. time advance ------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(st.sampled_from(NODES + COUNTED), st.data())
def test_advance_changes_no_output_and_bounds_later_output(node: tuple, data: Any) -> None:
    """advance() calls anywhere valid leave the output sequence as is; after advance(B) no stime < B."""
    spec, name = node
    p = NodePipeline(plan_node(spec, name))
    steps, _ = data.draw(plans(p.inputs))
    plain = NodePipeline(plan_node(spec, name))
    want = merged(feed(plain, [x for x in steps if x[0] is not None]), finish(plain))

    got: list[dict] = []
    bound = None
    for step in steps + [(None, BIG)]:
        out = feed(p, [step])  # with what advance(B) itself emits, before B becomes the bound
        for items in out.values():
            assert bound is None or all(stime >= bound for _, stime in items)
        got.append(out)
        if step[0] is None:
            bound = step[1] if bound is None else max(bound, step[1])
    assert merged(*got) == want
    # The watermark moved like a tuple's would: nothing counted as late.
    assert all(getattr(op, "late", 0) == 0 for op in p.operators)


def test_window_advance_closes_like_a_tuple() -> None:
    p = NodePipeline(plan_node(ORIG, "all"))
    p.entry("a")([({"sensor": "k0", "ts": t, "value": 1.0, "seq": 0}, t) for t in (1, 5)])
    assert not p.drain()
    p.advance(20)  # closes sliding windows [-20, 10) and [-10, 20), as a tuple at 20 would
    got = [(r["window_start"], r["count"], stime) for r, stime in p.drain()["sliding"]]
    assert got == [(-20, 2, 10), (-10, 2, 20)]
    slide = next(op for op in p.operators if op.name == "slide")
    assert isinstance(slide, WindowAggregate)
    assert slide.watermark == 20 and slide.oldest_time(0) == 1  # the stime that opened [0, 30)


def test_join_advance_expires_both_sides() -> None:
    p = NodePipeline(plan_node(SPLIT, "pair"))
    join = p.operators[0]
    p.entry("a")([({"sensor": "k0", "ts": 5, "value": 1.0, "seq": 0}, 5)])
    p.entry("b")([({"sensor": "k1", "ts": 6, "value": 1.0, "seq": 0}, 6)])
    assert join.oldest_time(0) == 5 and join.oldest_time(1) == 6
    p.advance(13)  # horizon 6: a@5 can no longer match, b@6 still can
    assert join.oldest_time(0) is None and join.oldest_time(1) == 6
    p.advance(14)
    assert join.oldest_time(1) is None and not p.drain()


# -- 2./3. checkpoint/redo and undo/redo ---------------------------------------------------
@st.composite
def failures(draw: Any, nodes: list[tuple[Spec, str]] = NODES) -> tuple:
    """A node, a stable prefix P, tentative input T after it, the stable suffix S after P, a trim interval."""
    spec, name = draw(st.sampled_from(nodes))
    streams = NodePipeline(plan_node(spec, name)).inputs
    p, last = draw(plans(streams))
    t, _ = draw(plans(streams, start=last))
    s, _ = draw(plans(streams, start=last))
    return spec, name, p, t, s, draw(st.sampled_from([1, 3, 10, 1024]))


@settings(max_examples=200, deadline=None)
@given(failures(NODES + COUNTED), st.sampled_from(["undo", "checkpoint", "checkpoint+undo"]))
def test_reconciled_output_equals_failure_free_output(case: tuple, method: str) -> None:
    """feed P, mark/snapshot, feed T, undo/restore, feed S  ==  feed P, feed S."""
    spec, name, prefix, tentative, suffix, trim = case
    assume(method == "checkpoint" or (spec, name) not in COUNTED)
    fresh = NodePipeline(plan_node(spec, name))
    want_p = feed(fresh, prefix)
    want_s = merged(feed(fresh, suffix), finish(fresh))

    p = set_trim(NodePipeline(plan_node(spec, name), undo=method != "checkpoint"), trim)
    assert feed(p, prefix) == want_p
    if method == "undo":
        p.mark()
    else:
        snap = p.snapshot()
    feed(p, tentative)  # tentative output: replaced by what follows
    if method == "undo":
        p.undo()
    else:
        p.restore(snap)
    assert not p.drain()  # reverting emits nothing
    assert merged(feed(p, suffix), finish(p)) == want_s


@settings(max_examples=150, deadline=None)
@given(failures(), st.data())
def test_undo_after_restart_from_checkpoint(case: tuple, data: Any) -> None:
    """A replica restarted from a checkpoint has no log from before it, yet undoes correctly."""
    spec, name, prefix, tentative, suffix, trim = case
    k = data.draw(st.integers(0, len(prefix)))
    fresh = NodePipeline(plan_node(spec, name))
    feed(fresh, prefix)
    want = merged(feed(fresh, suffix), finish(fresh))

    before = set_trim(NodePipeline(plan_node(spec, name), undo=True), trim)
    feed(before, prefix[:k])
    p = set_trim(NodePipeline(plan_node(spec, name), undo=True), trim)
    p.restore(before.snapshot())
    feed(p, prefix[k:])
    p.mark()
    feed(p, tentative)
    p.undo()
    assert merged(feed(p, suffix), finish(p)) == want


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_repeated_failures(data: Any) -> None:
    """Undo works again after a redo; unmark() forgets a mark and the tentative input stays."""
    spec, name = data.draw(st.sampled_from(NODES))
    streams = NodePipeline(plan_node(spec, name)).inputs
    fresh = NodePipeline(plan_node(spec, name))
    p = set_trim(NodePipeline(plan_node(spec, name), undo=True), data.draw(st.sampled_from([1, 5, 1024])))
    last = 0
    want: list[dict] = []
    got: list[dict] = []
    for _ in range(3):
        stable, last = data.draw(plans(streams, start=last, max_size=15))
        want.append(feed(fresh, stable))
        got.append(feed(p, stable))
        tentative, t_end = data.draw(plans(streams, start=last, max_size=15))
        p.mark()
        out = feed(p, tentative)
        if data.draw(st.booleans()):
            p.undo()
        else:
            p.unmark()
            got.append(out)
            want.append(feed(fresh, tentative))
            last = t_end
    assert merged(*got, finish(p)) == merged(*want, finish(fresh))


def test_undo_rebuilds_a_window_whose_time_runs_ahead_of_stime() -> None:
    """ha-review D8: the undo log is trimmed at the window's stream marker, which is in stime; the oldest
    window's start in the units of its time field (a minute ahead) trimmed input it still held."""
    reading = [({"sensor": "k0", "ts": t, "value": float(t), "seq": t}, t) for t in range(0, 60, 3)]
    fresh = NodePipeline(plan_node(SHIFTED, "all"))
    fresh.entry("a")(reading[:10])
    fresh.drain()
    fresh.entry("a")(reading[10:])
    want = finish(fresh)
    p = set_trim(NodePipeline(plan_node(SHIFTED, "all"), undo=True), 1)
    p.entry("a")(reading[:10])
    p.drain()
    p.mark()
    p.entry("a")([({"sensor": "k0", "ts": 28, "value": 1e6, "seq": -1}, 28)])  # tentative
    p.drain()
    p.undo()
    p.entry("a")(reading[10:])
    assert finish(p) == want


def test_the_log_keeps_a_batch_whose_last_tuple_is_older_than_the_marker() -> None:
    """A one-input node takes its input in log order: a tuple may come behind a newer one in a batch.
    The batch still holds the tuple that opened the open windows, so trimming keeps it."""
    a = [({"sensor": "k0", "ts": t, "value": 5.0, "seq": i}, t) for i, t in enumerate([5, 40, 12, 45, 70])]
    fresh = NodePipeline(plan_node(ORIG, "all"))
    fresh.entry("a")([a[0]])
    fresh.entry("a")(a[1:3])  # 12 is late: its windows closed at 40
    fresh.drain()
    fresh.entry("a")(a[3:])
    want = finish(fresh)
    p = set_trim(NodePipeline(plan_node(ORIG, "all"), undo=True), 1)
    p.entry("a")([a[0]])
    p.entry("a")(a[1:3])
    p.drain()
    p.mark()  # trims the log at the markers (40: the stime that opened the open windows)
    p.entry("a")([({"sensor": "k0", "ts": 41, "value": 1e6, "seq": -1}, 41)])  # tentative
    p.drain()
    p.undo()
    p.entry("a")(a[3:])
    assert finish(p) == want


def test_trimming_bounds_the_log() -> None:
    p = set_trim(NodePipeline(plan_node(ALL, "all"), undo=True), 50)
    a, b = p.entry("a"), p.entry("b")
    for ts in range(0, 20_000, 2):
        rec = {"sensor": f"k{ts % 3}", "ts": ts, "value": 1.0, "seq": ts}
        (a if ts % 4 else b)([(rec, ts)])
    assert p.logs and all(len(lg.entries) < 200 for lg in p.logs)
    p.mark()
    assert p.logs[0].mark_at == len(p.logs[0].entries)


def test_stateless_operators_have_nothing_to_save() -> None:
    p = NodePipeline(plan_node(SPLIT, "fm"), undo=True)
    assert p.logs == [] and all(op.state() is None for op in p.operators)
    p.mark()
    p.undo()


def test_undo_needs_undo_pipeline_and_mark() -> None:
    with pytest.raises(RuntimeError):
        NodePipeline(plan_node(ALL, "all")).mark()
    with pytest.raises(RuntimeError):
        NodePipeline(plan_node(ALL, "all"), undo=True).undo()
