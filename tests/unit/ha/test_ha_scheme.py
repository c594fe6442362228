"""An HA scheme's replica in the node's scheme slot, over fakes: it waits for the coordinator's
order, takes a log over where it stands, and stops when it is failed over."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_END

from services.control.messages import ControlMessage, RoleOrder
from services.control.states import NodeState
from services.core.errors import FencedError
from services.core.tuples import BOUNDARY, EPOCH, STABLE, TENTATIVE, UNDO
from services.ha import scheme as ha_scheme
from services.ha.amnesia import AmnesiaScheme
from services.operators.reference import evaluate
from services.spec import parse_spec
from tests.unit.dpc.fake_node import FakeNode

SPEC = parse_spec("""\
name: amn
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: a, output: b, where: "value > 0"}
nodes:
  n: {operators: [keep], replicas: 2, ha: {scheme: amnesia}}
""")


def _rec(seq: int, value: float = 1.0) -> dict:
    return {"sensor": "s1", "ts": seq, "value": value, "seq": seq}


def _role(role: str, epoch: int, replica: int = 1) -> ControlMessage:
    return RoleOrder("n", 0, replica, role=role, epoch=epoch)


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    # The old primary wrote stable ids up to 41 and a boundary at 5000 before it failed.
    monkeypatch.setattr(ha_scheme, "output_tail", lambda bootstrap, topic, partition: (41, 5000))
    return FakeNode(SPEC, "n", replica=1)


def test_one_log_per_stream_for_every_replica() -> None:
    assert SPEC.stream_topics("b") == ["amn.b"]
    n0, n1 = FakeNode(SPEC, "n", replica=0), FakeNode(SPEC, "n", replica=1)
    assert n0.outputs.topic("b") == n1.outputs.topic("b") == "amn.b"
    assert SPEC.restart_topic("n", 0) == SPEC.restart_topic("n", 1) == "amn.restart.n"  # checkpoints any replica reads


def test_a_replica_reads_and_writes_nothing_until_it_is_made_primary(node: FakeNode) -> None:
    assert isinstance(node.scheme, AmnesiaScheme)
    assert node.scheme.on_restart() is None  # no input read
    assert node.roles == [("candidate", 0)]
    node.scheme.on_control(_role("secondary", 7), 0.0)
    assert node.roles[-1] == ("secondary", 7)
    assert node.epochs == [] and not node.producer.topics


def test_a_takeover_announces_its_epoch_and_continues_the_log_where_it_stands(node: FakeNode) -> None:
    node.scheme.on_restart()
    node.scheme.on_control(_role("primary", 9), 0.0)
    assert node.epochs == [9] and node.roles[-1] == ("primary", 9)
    assert node.consumer.assigned == {"amn.a": OFFSET_END}  # amnesia: from the inputs' end
    port = node.inputs.ports[0]
    assert port.midway  # its first tuple may have any id
    msgs = [
        node.message("a", STABLE, 700, 4990, _rec(1)),  # a result below the log's last boundary: part of the gap
        node.message("a", STABLE, 701, 5100, _rec(2)),
        node.message("a", BOUNDARY, 701, 5300),
    ]
    node.step(msgs, 1.0)
    written = node.written("b")
    assert written[0][0] is EPOCH
    assert [(t, tid, stime) for t, tid, stime, _ in written[1:]] == [(STABLE, 42, 5100), (BOUNDARY, 42, 5300)]
    assert node.scheme.path.soutputs["b"].below_floor == 1


def test_a_primary_told_it_is_secondary_stops_and_a_stale_order_is_ignored(node: FakeNode) -> None:
    node.scheme.on_restart()
    node.scheme.on_control(_role("primary", 9), 0.0)
    node.scheme.on_control(_role("secondary", 3), 0.0)  # older than its epoch: read late
    node.scheme.on_control(_role("primary", 12, replica=0), 0.0)  # another replica's
    with pytest.raises(FencedError, match="failed over"):
        node.scheme.on_control(_role("secondary", 12), 0.0)


BELOW_DPC = parse_spec("""\
name: mix
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
  c: {schema: reading, key: sensor}
operators:
  up: {type: filter, input: a, output: b, where: "True"}
  keep: {type: filter, input: b, output: c, where: "value > 0"}
nodes:
  u: {operators: [up], replicas: 2}
  n: {operators: [keep], replicas: 2, ha: {scheme: amnesia}}
""")


def test_below_a_dpc_node_tentative_input_counts_as_not_yet_arrived(monkeypatch: pytest.MonkeyPatch) -> None:
    """ha-review D2: the HA node waits for its DPC upstream's corrections, never computes on tentative
    input, stays out of DPC's failure states and goes on sending boundaries."""
    monkeypatch.setattr(ha_scheme, "output_tail", lambda bootstrap, topic, partition: (-1, -1))  # a first start
    n = FakeNode(BELOW_DPC, "n", replica=0)
    n.scheme.on_restart()
    n.scheme.on_control(RoleOrder("n", 0, 0, role="primary", epoch=1), 0.0)
    stable = [n.message("b", STABLE, i, 100 * i, _rec(100 * i)) for i in range(3)]
    n.step([*stable, n.message("b", BOUNDARY, 2, 300)], 1.0)
    tentative = [
        n.message("b", TENTATIVE, 3 + i, 300 + 100 * i, _rec(300 + 100 * i, 5.0), tmax=300 + 100 * i) for i in range(3)
    ]
    n.step(tentative, 2.0)
    n.step([], 3.0)
    assert [rec["seq"] for _, rec in n.stable("c")] == [0, 100, 200]  # the tentative ones wait
    assert all(t is not TENTATIVE for t, *_ in n.written("c")) and n.states[-1] is NodeState.STABLE
    correction = [n.message("b", UNDO, 2, 0)]
    correction += [n.message("b", STABLE, 3 + i, 300 + 100 * i, _rec(300 + 100 * i, 7.0)) for i in range(2)]
    n.step([*correction, n.message("b", BOUNDARY, 4, 500)], 4.0)
    assert [(rec["seq"], rec["value"]) for _, rec in n.stable("c")][3:] == [(300, 7.0), (400, 7.0)]
    assert [stime for t, _, stime, _ in n.written("c") if t is BOUNDARY][-1] >= 400  # its boundaries go on


AMNESIA_WINDOW = parse_spec("""\
name: amw
streams:
  a: {schema: reading, key: sensor}
  b: {schema: window_stat, key: key}
operators:
  win: {type: window, input: a, output: b, key: sensor, size: 400, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win], replicas: 2, ha: {scheme: amnesia}}
""")


def test_amnesia_writes_no_window_that_was_open_when_it_took_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """ha-review D6: read from the inputs' end, the windows open at the failure lack their start; none
    of them is written, every window from the first boundary read on is, whole."""
    monkeypatch.setattr(ha_scheme, "output_tail", lambda bootstrap, topic, partition: (41, 900))  # a takeover
    n = FakeNode(AMNESIA_WINDOW, "n", replica=0)
    n.scheme.on_restart()
    n.scheme.on_control(RoleOrder("n", 0, 0, role="primary", epoch=1), 0.0)
    times = [1000 + 10 * i for i in range(150)]
    recs: list[dict] = [{"sensor": f"s{i % 2}", "ts": t, "value": float(i), "seq": i} for i, t in enumerate(times)]
    first_bound = 0
    for k in range(0, 150, 10):  # the inputs from their end on: what came before is lost
        msgs = [n.message("a", STABLE, i, times[i], recs[i]) for i in range(k, k + 10)]
        bound = times[k + 9] + 1
        first_bound = first_bound or bound
        n.step([*msgs, n.message("a", BOUNDARY, k + 9, bound)], 1.0 + k)
    got = [rec for _, rec in n.stable("b")]
    assert n.stable("b")[0][0] == 42  # the log's ids go on
    full = evaluate(AMNESIA_WINDOW, {"a": [recs]})["b"][0]
    want = [w for w in full if w["window_start"] >= first_bound]
    assert got and got == want[: len(got)], "a window open at the takeover was written, or a whole one lost"
