"""State parts (``services.operators.parts``): the window's and the join's state as independent parts.

Two properties, over random in-order streams fed in batches with time promises between them:
the parts an operator (a time window, a count window, a join) reports as opened and not yet
closed are exactly the parts it holds, at every step; and an operator assembled from each part's state alone (with the times it had
reached) holds the same state and goes on to give the same output.
"""

from __future__ import annotations

import pickle
from typing import Any

from hypothesis import given, settings

from services.node.pipeline import NodePipeline
from services.operators.base import Operator
from services.operators.count_window import CountWindow
from services.operators.join import WindowJoin
from services.operators.parts import PartId
from services.operators.window import WindowAggregate
from services.spec.plan import plan_node
from tests.unit.operators.test_deltas import Step, feed, plain, runs
from tests.unit.operators.test_operators import in_order_stream, spec


def parted(p: NodePipeline) -> list[Operator]:
    ops: list[Operator] = [op for op in p.operators if isinstance(op, WindowAggregate | WindowJoin | CountWindow)]
    assert {type(op) for op in ops} == {WindowAggregate, WindowJoin, CountWindow}
    return ops


def watched(op: Any) -> set[PartId]:
    """The parts ``op`` says are open, kept up to date by its events."""
    open_: set[PartId] = set()

    def opened(pid: PartId, stime: int) -> None:
        assert pid not in open_, f"{op.name}: {pid} opened twice"
        open_.add(pid)

    def closed(pid: PartId, stime: int) -> None:
        assert pid in open_, f"{op.name}: {pid} closed but never opened"
        open_.remove(pid)

    op.watch(opened, closed)
    return open_


@settings(max_examples=150, deadline=None)
@given(runs())
def test_the_parts_opened_and_not_closed_are_the_parts_held(run: tuple[list[dict], list[dict], list[Step]]) -> None:
    a, b, steps = run
    p = NodePipeline(plan_node(spec, "all"))
    tracked = [(op, watched(op)) for op in parted(p)]

    def check() -> None:
        for op, open_ in tracked:
            assert open_ == set(op.part_ids()), op.name  # type: ignore[attr-defined]

    feed(p, a, b, steps, check)


def comparable(op: Operator) -> Any:
    """``op``'s state; of a join's arrival order across keys, what expiry reads of it: the tuples'
    times in order (tuples of one time leave together, in whichever order of keys)."""
    st = plain(op.state())
    if isinstance(op, WindowJoin):
        sides, order, watermark = st
        st = [sides, [sorted(side, key=lambda e: (e[0], repr(e[1]))) for side in order], watermark]
    return st


def _assembled(p: NodePipeline) -> NodePipeline:
    """A pipeline whose window and join are loaded part by part from ``p``'s, each part's state
    pickled alone (as a record of it would be), with the times they had reached."""
    q = NodePipeline(plan_node(spec, "all"))
    for src, dst in zip(parted(p), parted(q), strict=True):
        for pid in src.part_ids():  # type: ignore[attr-defined]
            dst.load_part(pid, pickle.loads(pickle.dumps(src.part(pid))))  # type: ignore[attr-defined]
        if isinstance(src, WindowAggregate) and isinstance(dst, WindowAggregate):
            dst.watermark, dst.late = src.watermark, src.late
        elif isinstance(src, WindowJoin) and isinstance(dst, WindowJoin):
            dst.watermark = list(src.watermark)
        elif isinstance(src, CountWindow) and isinstance(dst, CountWindow):
            dst.made = src.made  # the windows it opened, closed ones too: what numbers its next one
    for src_op, dst_op in zip(p.operators, q.operators, strict=True):
        if not isinstance(src_op, WindowAggregate | WindowJoin | CountWindow):
            dst_op.set_state(pickle.loads(pickle.dumps(src_op.state())))
    return q


@settings(max_examples=150, deadline=None)
@given(runs(), in_order_stream())
def test_an_operator_assembled_from_its_parts_holds_the_state_and_goes_on_alike(
    run: tuple[list[dict], list[dict], list[Step]], more: list[dict]
) -> None:
    a, b, steps = run
    p = NodePipeline(plan_node(spec, "all"))
    feed(p, a, b, steps)
    p.drain()
    q = _assembled(p)
    assert [comparable(op) for op in parted(q)] == [comparable(op) for op in parted(p)]
    t0 = max([r["ts"] for r in a + b], default=0)
    later = [dict(r, ts=r["ts"] + t0) for r in more]
    for x in (p, q):
        x.entry("a")([(r, r["ts"]) for r in later])
        x.entry("b")([(r, r["ts"]) for r in later])
        x.advance(t0 + 1000)
    assert p.drain() == q.drain()
