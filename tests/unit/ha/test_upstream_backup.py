"""Upstream backup over fakes: a replica that takes over empty and reads the inputs again from an
acknowledgement regenerates the rest of the output exactly (precise recovery, ICDE 2005
sections 5.2 and 6), whatever acknowledgement it starts from, however the polls split the
input, and wherever the old primary's output stopped. Under rollback recovery it writes again,
identical, what the log holds from the acknowledgement's cut on (repeating), and nothing before."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.control.messages import ControlMessage, RoleOrder
from services.control.states import NodeState
from services.core.tuples import BOUNDARY, STABLE, read_headers
from services.ha import upstream_backup as ub
from services.ha.acks import Ack
from services.ha.upstream_backup import UpstreamBackupScheme
from services.spec import parse_spec
from services.spec.model import Recovery
from tests.unit.dpc.fake_node import FakeMessage, FakeNode

WINDOW = parse_spec("""\
name: ub
streams:
  a: {schema: reading, key: sensor}
  w: {schema: window_stat, key: key}
operators:
  win: {type: window, input: a, output: w, key: sensor, size: 300, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win], replicas: 2, ha: {scheme: upstream_backup, recovery: precise, interval_ms: 50}}
""")

UNION_TEXT = """\
name: ub2
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
  u: {schema: reading, key: sensor}
  w: {schema: window_stat, key: key}
operators:
  both: {type: union, inputs: [a, b], output: u}
  win: {type: window, input: u, output: w, key: sensor, size: 200, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [both, win], replicas: 2, ha: {scheme: upstream_backup, interval_ms: 50}}
"""
UNION = parse_spec(UNION_TEXT.replace("interval_ms: 50", "recovery: precise, merge: time, interval_ms: 50"))

# A window behind a window: the second one's state needs input from one first-window size earlier.
CHAIN_TEXT = """\
name: ub3
streams:
  a: {schema: reading, key: sensor}
  w1: {schema: window_stat, key: key}
  r1: {schema: reading, key: sensor}
  w: {schema: window_stat, key: key}
operators:
  win1: {type: window, input: a, output: w1, key: sensor, size: 300, slide: 100,
         aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  back: {type: map, input: w1, output: r1, fields: {sensor: key, ts: window_end, value: sum, seq: count}}
  win: {type: window, input: r1, output: w, key: sensor, size: 400, slide: 200,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win1, back, win], replicas: 2, ha: {scheme: upstream_backup, recovery: precise, interval_ms: 50}}
"""
CHAIN = parse_spec(CHAIN_TEXT)


ROLLBACK = parse_spec(CHAIN_TEXT.replace("recovery: precise", "recovery: rollback"))

# ha-review D8: a window whose time field runs a minute ahead of the stream time (stime).
SHIFTED = parse_spec("""\
name: ub4
streams:
  a: {schema: reading, key: sensor}
  s: {schema: reading, key: sensor}
  w: {schema: window_stat, key: key}
operators:
  shift: {type: map, input: a, output: s, fields: {sensor: sensor, ts: "ts + 60000", value: value, seq: seq}}
  win: {type: window, input: s, output: w, key: sensor, size: 300, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [shift, win], replicas: 2, ha: {scheme: upstream_backup, recovery: precise, interval_ms: 50}}
""")


def _role(role: str, epoch: int, replica: int) -> ControlMessage:
    return RoleOrder("n", 0, replica, role=role, epoch=epoch)


def _inputs(node: FakeNode, streams: list[str], n: int, rnd: random.Random) -> list[FakeMessage]:
    """``n`` readings per input in time order with a boundary now and then, interleaved across inputs."""
    per: list[list[FakeMessage]] = []
    for s in streams:
        t, msgs = 1000, []
        for i in range(n):
            t += rnd.choice((0, 7, 30, 55))
            rec = {"sensor": rnd.choice("xyz"), "ts": t, "value": float(rnd.randint(-5, 9)), "seq": i}
            msgs.append(node.message(s, STABLE, i, t, rec))
            if rnd.random() < 0.15:
                msgs.append(node.message(s, BOUNDARY, i, t))
        msgs.append(node.message(s, BOUNDARY, n - 1, t + 10_000))  # the end: every window closes
        per.append(msgs)
    out: list[FakeMessage] = []
    while any(per):
        src = rnd.choice([p for p in per if p])
        out.append(src.pop(0))
    return out


def _feed(node: FakeNode, msgs: list[FakeMessage], rnd: random.Random) -> None:
    """The messages in polls of random sizes, then a few idle loop turns."""
    i, now = 0, 1.0
    while i < len(msgs):
        k = rnd.randint(1, 12)
        node.step(msgs[i : i + k], now)
        i, now = i + k, now + 0.01
    for _ in range(3):
        node.step([], now)


def _promote(node: FakeNode, epoch: int) -> UpstreamBackupScheme:
    scheme = node.scheme
    assert isinstance(scheme, UpstreamBackupScheme)
    scheme.acking.interval_s = 0.0  # a cut at every bucket start: every one of them is tried below
    scheme.on_restart()
    scheme.on_control(_role("primary", epoch, node.replica), 0.0)
    return scheme


@pytest.fixture
def no_broker(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the takeover reads of Kafka, set by each test: the acks, the log's tail and its stable tuples."""
    broker: dict[str, Any] = {"acks": [], "tail": (-1, -1), "stable": {}}
    monkeypatch.setattr(ub, "read_acks", lambda *a: broker["acks"])
    monkeypatch.setattr(ub, "output_tail", lambda *a: broker["tail"])
    monkeypatch.setattr(ub, "check_retained", lambda *a: None)
    monkeypatch.setattr(
        "services.node.resume.stable_after",
        lambda b, t, p, last: {i: v for i, v in broker["stable"].items() if i > last},
    )
    return broker


def _acks(node: FakeNode) -> list[Ack]:
    return [Ack.decode(w.value or b"") for w in node.producer.topics[node.plan.acks_topic]]


def _check_takeovers(spec: Any, streams: list[str], seed: int, tries: int, broker: dict[str, Any]) -> None:
    rnd = random.Random(seed)
    broker.update(acks=[], tail=(-1, -1), stable={})  # an empty deployment
    primary = FakeNode(spec, "n", replica=0)
    _promote(primary, 5)
    msgs = _inputs(primary, streams, 60, rnd)
    _feed(primary, msgs, rnd)
    written = primary.stable_in(primary.outputs.topic("w"))
    want = primary.stable("w")
    assert want and [i for i, _ in want] == list(range(len(want)))
    acks = _acks(primary)
    assert acks and all(a.epoch == 5 for a in acks)
    for _ in range(tries):
        ack = rnd.choice(acks)
        # The old primary stopped somewhere after the output before the ack's cut was written.
        tail = rnd.randint(ack.outputs["w"] - 1, len(want) - 1)
        broker.update(acks=[ack], tail=(tail, -1), stable=dict(written[: tail + 1]))
        other = FakeNode(spec, "n", replica=1)
        for t, log in primary.log.items():
            other.log[t], other.offsets[t] = list(log), len(log)
        _promote(other, 9)
        assert other.states[-1] is NodeState.RECOVERING  # heartbeats say so until it has caught up
        assert other.consumer.assigned == ack.input_offsets
        assert _acks(other)[0] == ack.restamped(9, _acks(other)[0].taken_ms)  # pinned for the coordinator's trims
        replay = [m for m in msgs if m.offset() >= ack.input_offsets[m.topic()]]
        _feed(other, replay, rnd)
        got = [(i, rec) for i, rec in other.stable("w")]
        where = f"takeover from cut {ack.cut} with the log at id {tail}"
        if spec.nodes["n"].ha.guarantee is Recovery.PRECISE:
            assert want[: tail + 1] + got == want, where
        else:  # repeating: from the cut on, what the log holds comes again
            assert got == want[ack.outputs["w"] :], where
        assert other.states[-1] is NodeState.STABLE


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_a_takeover_from_any_ack_regenerates_the_rest_of_a_sliding_window_exactly(seed: int, no_broker) -> None:
    _check_takeovers(WINDOW, ["a"], seed, 6, no_broker)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_a_takeover_of_a_two_input_node_regenerates_the_rest_exactly(seed: int, no_broker) -> None:
    _check_takeovers(UNION, ["a", "b"], seed, 6, no_broker)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_a_takeover_of_a_chain_of_windows_regenerates_the_rest_exactly(seed: int, no_broker) -> None:
    _check_takeovers(CHAIN, ["a"], seed, 6, no_broker)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_a_takeover_of_a_window_whose_time_runs_ahead_regenerates_the_rest_exactly(seed: int, no_broker) -> None:
    _check_takeovers(SHIFTED, ["a"], seed, 6, no_broker)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_a_rollback_takeover_writes_again_what_the_log_holds_from_the_cut_on(seed: int, no_broker) -> None:
    _check_takeovers(ROLLBACK, ["a"], seed, 6, no_broker)


def test_an_ack_is_sent_once_the_output_before_its_cut_is_acknowledged(no_broker) -> None:
    """A published ack lets the upstream logs trim what produced the output before its cut, so
    that output must be in Kafka already: the loop waits for every batch an HA node writes."""
    rnd = random.Random(4)
    primary = FakeNode(WINDOW, "n", replica=0)
    primary.settings = dataclasses.replace(primary.settings, batch_size=1)  # every poll full: more input waits
    _promote(primary, 5)
    _feed(primary, _inputs(primary, ["a"], 60, rnd), rnd)
    producer, out = primary.producer, primary.outputs.topic("w")
    sent_at = [i for i, t in enumerate(producer.order) if t == primary.plan.acks_topic]  # each ack's place
    assert len(sent_at) > 5
    claims = 0
    stable = [read_headers(w.headers)[:2] for w in producer.topics[out]]
    for i, ack in zip(sent_at, _acks(primary), strict=True):
        acked = stable[: producer.acked_in(out, i)]
        assert all((STABLE, tid) in acked for tid in range(ack.outputs["w"])), f"ack of cut {ack.cut}"
        claims += ack.outputs["w"] > 0
    assert claims > 5, "acks that claim output"


def test_without_any_ack_the_takeover_reads_the_inputs_from_their_start(no_broker) -> None:
    node = FakeNode(WINDOW, "n", replica=1)
    _promote(node, 3)
    assert node.consumer.assigned == {"ub.a": 0}
    assert _acks(node) == []  # nothing to pin: the coordinator trims nothing for it yet


def test_an_ack_names_the_oldest_tuple_of_the_open_windows(no_broker) -> None:
    node = FakeNode(WINDOW, "n")
    scheme = _promote(node, 2)
    scheme.acking.interval_s = 3600.0
    msgs = [
        node.message("a", STABLE, i, 1000 + 50 * i, {"sensor": "x", "ts": 1000 + 50 * i, "value": 1.0, "seq": i})
        for i in range(10)
    ]
    node.step(msgs + [node.message("a", BOUNDARY, 9, 1450)], 1.0)  # the operators move to 1400
    node.step([node.message("a", BOUNDARY, 9, 1500)], 1.1)  # to 1500: a cut there
    scheme.acking.next_cut = 0.0
    node.step([], 1.2)  # the cut's output is written: its ack goes out
    ack = _acks(node)[-1]
    # At 1500 the windows [1300, 1600) and [1400, 1700) are open; the oldest holds ts 1300 = id 6.
    assert ack.cut == 1500 and ack.input_ids == {"a": 6}
    assert ack.input_offsets["ub.a"] <= 6  # an offset at or before that tuple
    assert ack.outputs == {"w": scheme.path.soutputs["w"].next_id}


def test_an_ack_names_the_oldest_tuple_of_the_open_windows_when_their_time_runs_ahead(no_broker) -> None:
    """ha-review D8: the cut compares the window's stream marker with bucket starts in stime, so the
    marker is in stime too, not the oldest window's start in the units of its time field."""
    node = FakeNode(SHIFTED, "n")
    scheme = _promote(node, 2)
    scheme.acking.interval_s = 3600.0
    msgs = [
        node.message("a", STABLE, i, 1000 + 50 * i, {"sensor": "x", "ts": 1000 + 50 * i, "value": 1.0, "seq": i})
        for i in range(10)
    ]
    node.step(msgs + [node.message("a", BOUNDARY, 9, 1450)], 1.0)
    node.step([node.message("a", BOUNDARY, 9, 1500)], 1.1)  # to 1500: a cut there
    scheme.acking.next_cut = 0.0
    node.step([], 1.2)
    ack = _acks(node)[-1]
    # Open in the window's time: [61200, 61500), [61300, 61600), [61400, 61700); the oldest holds the
    # tuples from time 61200 on, which is stime 1200 = id 4.
    assert ack.cut == 1500 and ack.input_ids == {"a": 4}
    assert ack.input_offsets["ub4.a"] <= 4


def test_a_source_that_ends_moves_the_operators_to_its_last_boundary_at_once(no_broker) -> None:
    """A source's end is a boundary far ahead: the operators go there in one call, not bucket by bucket."""
    node = FakeNode(WINDOW, "n")
    scheme = _promote(node, 2)
    rec = {"sensor": "x", "ts": 1000, "value": 1.0, "seq": 0}
    node.step([node.message("a", STABLE, 0, 1000, rec), node.message("a", BOUNDARY, 0, 2**53)], 1.0)
    assert scheme.path.op_time == 2**53 - 2**53 % 100
    assert [r["window_end"] for _, r in node.stable("w")] == [1100, 1200, 1300]


def test_the_primary_reports_its_newest_written_ack_as_its_restart_point(no_broker) -> None:
    """ha-review D1: a takeover rebuilds from the newest ack the log holds the output of, so the restart
    point the heartbeats report (the coordinator trims no further) is an ack already written; the
    newest one from the loop turn after its publication on, also when no input comes any more (an
    emptied log's readers must let it be trimmed down to its tail)."""
    primary = FakeNode(WINDOW, "n", replica=0)
    scheme = _promote(primary, 5)
    assert primary.keeps == {"w": 0}  # no ack yet: a takeover reads the log back from its start
    rnd = random.Random(3)
    msgs, now = _inputs(primary, ["a"], 60, rnd), 1.0
    for i in range(0, len(msgs), 5):
        primary.step(msgs[i : i + 5], now)
        now += 0.01
        producer, acks = primary.producer, _acks(primary)
        written = acks[: producer.acked_in(primary.plan.acks_topic)]
        assert primary.keeps == {"w": 0} or primary.keeps in [a.outputs for a in written], "an ack not yet written"
    scheme.acking.next_cut = float("inf")  # no cut published from here on
    primary.step([], now)
    acks = _acks(primary)
    assert len(acks) >= 2 and acks[-1].outputs["w"] > 0
    assert primary.keeps == acks[-1].outputs and primary.needs == acks[-1].input_offsets


def test_a_burst_the_input_stops_after_is_acknowledged_within_an_interval(no_broker) -> None:
    """A new primary that catches up within one interval, after which its input stops (the end of a
    stream, an idle upstream), still acknowledges its newest cut: before, cuts were taken only at a
    bucket start reached once an interval had passed, none came, and the next takeover wrote the
    whole burst again (HA schedule seed 26: upstream backup under rollback, a run of 128 tuples)."""
    node = FakeNode(WINDOW, "n")
    scheme = _promote(node, 2)
    scheme.acking.next_cut = float("inf")  # the whole burst within one interval
    msgs = [
        node.message("a", STABLE, i, 1000 + 50 * i, {"sensor": "x", "ts": 1000 + 50 * i, "value": 1.0, "seq": i})
        for i in range(20)
    ]
    node.step(msgs + [node.message("a", BOUNDARY, 19, 2000)], 1.0)  # the operators move to 2000
    assert _acks(node) == []
    scheme.acking.next_cut = 0.0  # the interval has passed; no input comes
    node.step([], 1.1)
    acks = _acks(node)
    assert [a.cut for a in acks] == [2000]
    assert acks[0].outputs == {"w": scheme.path.soutputs["w"].next_id} and acks[0].outputs["w"] > 0
    node.step([], 1.2)
    assert len(_acks(node)) == 1, "a cut is published once"
