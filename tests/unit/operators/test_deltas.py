"""Operator deltas (passive standby's checkpoints between images): a copy that applies every delta
holds the primary's very state at each delta, and goes on to produce the same output."""

from __future__ import annotations

import pickle
from collections import deque
from typing import Any, Callable, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from services.node.pipeline import NodePipeline
from services.operators.window import Accumulator, WindowAggregate
from services.spec.plan import plan_node
from tests.unit.operators.test_operators import in_order_stream, spec

Step = tuple[str, int]  # ("a" | "b", tuples) a batch of one input; ("advance", 0); ("delta", 0)


def plain(x: Any) -> Any:
    """State as comparable values: accumulators as their fields, queues as lists."""
    if isinstance(x, Accumulator):
        return plain(x.__getstate__())  # copied: the accumulator's lists go on changing
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, deque)):
        return [plain(v) for v in x]
    return x


def state(p: NodePipeline) -> Any:
    return plain([op.state() for op in p.operators])


@st.composite
def runs(draw: Any) -> tuple[list[dict], list[dict], list[Step]]:
    """Two in-order streams fed in batches, with time promises and deltas taken between batches."""
    a, b = draw(in_order_stream()), draw(in_order_stream())
    steps: list[Step] = []
    left = {"a": len(a), "b": len(b)}
    while left["a"] or left["b"]:
        s = draw(st.sampled_from([k for k, n in left.items() if n]))
        n = draw(st.integers(1, left[s]))
        left[s] -= n
        steps.append((s, n))
        steps.append(draw(st.sampled_from([("delta", 0), ("advance", 0), ("none", 0)])))
    return a, b, steps


def feed(
    p: NodePipeline, a: list[dict], b: list[dict], steps: list[Step], check: Callable[[], None] | None = None
) -> list[list[object]]:
    """Run ``steps`` on ``p`` (``check`` after each); returns the deltas taken, each pickled and read back
    as a standby gets it."""
    pos = {"a": 0, "b": 0}
    data = {"a": a, "b": b}
    deltas: list[list[object]] = []
    for kind, n in steps:
        if kind in data:
            batch = data[kind][pos[kind] : pos[kind] + n]
            pos[kind] += n
            p.entry(kind)([(r, r["ts"]) for r in batch])
        elif kind == "advance":
            p.advance(min(x[pos[k] - 1]["ts"] if pos[k] else 0 for k, x in data.items()))
        elif kind == "delta":
            deltas.append(pickle.loads(pickle.dumps(p.delta())))
            p.drain()
        if check is not None:
            check()
    return deltas


@settings(max_examples=150, deadline=None)
@given(runs(), in_order_stream())
def test_a_copy_applying_every_delta_holds_the_state_and_goes_on_alike(
    run: tuple[list[dict], list[dict], list[Step]], more: list[dict]
) -> None:
    a, b, steps = run
    primary, standby = NodePipeline(plan_node(spec, "all")), NodePipeline(plan_node(spec, "all"))
    done = 0
    for i, step in enumerate([*steps, ("delta", 0)]):
        for d in feed(primary, a, b, steps[done:i] + [step] if step[0] == "delta" else []):
            standby.apply_delta(d)
            assert state(standby) == state(primary), f"after the delta at step {i}"
        if step[0] == "delta":
            done = i + 1
    # The same further input gives the same output (times after both streams' ends).
    t0 = max([r["ts"] for r in a + b], default=0)
    later = [dict(r, ts=r["ts"] + t0) for r in more]
    for p in (primary, standby):
        p.entry("a")([(r, r["ts"]) for r in later])
        p.entry("b")([(r, r["ts"]) for r in later])
        p.advance(t0 + 1000)
    assert primary.drain() == standby.drain()


def slide(p: NodePipeline) -> WindowAggregate:
    """The sliding window (size 30, slide 10, on a), whose deltas the tests look into."""
    return next(op for op in p.operators if isinstance(op, WindowAggregate) and op.name == "slide")


def whole(d: object) -> bool:
    return cast(tuple[bool, Any], d)[0]


def changed_keys(d: object) -> dict[int, set[Any]]:
    changed = cast(tuple[bool, Any], d)[1][0]
    return {s: set(ks) for s, ks in changed.items()}


def test_the_first_delta_and_the_first_after_a_new_state_are_whole() -> None:
    p = NodePipeline(plan_node(spec, "all"))
    window = slide(p)
    rec = {"sensor": "k1", "ts": 5, "value": 1.0, "seq": 0}
    p.entry("a")([(rec, 5)])
    assert whole(window.delta())  # nothing before it is known
    p.entry("a")([(dict(rec, ts=6), 6)])
    d = window.delta()
    assert not whole(d) and all(keys == {"k1"} for keys in changed_keys(d).values())
    window.set_state(pickle.loads(pickle.dumps(window.state())))
    assert whole(window.delta())
    window.clear()
    assert whole(window.delta())


def test_a_delta_carries_what_changed_not_the_whole_state() -> None:
    p = NodePipeline(plan_node(spec, "all"))
    window = slide(p)
    p.entry("a")([({"sensor": f"k{i}", "ts": 1, "value": 1.0, "seq": i}, 1) for i in range(100)])
    window.delta()
    p.entry("a")([({"sensor": "k7", "ts": 2, "value": 2.0, "seq": 100}, 2)])
    assert changed_keys(window.delta()) == {-20: {"k7"}, -10: {"k7"}, 0: {"k7"}}
