"""Both reconcilers bring the operators back to their state at ``begin()``."""

from __future__ import annotations

import pytest

from services.dpc.reconciler import CheckpointRedo, UndoRedo, reconciler
from services.node.pipeline import NodePipeline
from services.spec import parse_spec
from services.spec.plan import plan_node
from services.spec.policies import Reconciliation

SPEC = """\
name: r
streams:
  a: {schema: reading, key: sensor}
  w: {schema: window_stat, key: key}
operators:
  win: {type: window, input: a, output: w, key: sensor, size: 100, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win]}
"""


def rec(ts: int) -> tuple[dict, int]:
    return ({"sensor": "s", "ts": ts, "value": 1.0, "seq": ts}, ts)


@pytest.mark.parametrize("method", list(Reconciliation))
def test_rollback_returns_to_the_state_at_begin(method: Reconciliation) -> None:
    pipe = NodePipeline(plan_node(parse_spec(SPEC), "n"), undo=method is Reconciliation.UNDO)
    feed = pipe.entry("a")
    feed([rec(10), rec(20)])
    before = pipe.snapshot()
    r = reconciler(method, pipe)
    assert isinstance(r, CheckpointRedo if method is Reconciliation.CHECKPOINT else UndoRedo)
    r.begin(before)
    feed([rec(30), rec(150)])  # tentative input: closes the first window, opens a second
    pipe.drain()
    r.rollback()
    assert pipe.snapshot() == before
    feed([rec(40), rec(250)])  # redo: the corrected input
    assert [r["count"] for r, _ in pipe.drain()["w"]] == [3]


def test_checkpoint_rollback_without_begin_is_an_error() -> None:
    pipe = NodePipeline(plan_node(parse_spec(SPEC), "n"))
    with pytest.raises(RuntimeError, match="without a snapshot"):
        CheckpointRedo(pipe).rollback()
