"""Active standby over fakes: the secondary processes the same input, holds its results until the
primary's trims say the log has them, and a takeover at any moment continues the log exactly
(precise recovery for a deterministic node, ICDE 2005 sections 5.3 and 6), whether the
secondary was ahead of the primary or behind, and whether it joined late from an ack. Under
rollback recovery the takeover writes again what the log had since the last trim message
(repeating: identical duplicates, nothing lost), and nothing before it."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.control.messages import ControlKind, RoleOrder, Trim
from services.control.states import NodeState
from services.core.tuples import BOUNDARY, STABLE
from services.ha import active_standby as act
from services.ha import upstream_backup as ub
from services.ha.active_standby import ActiveStandbyScheme
from services.ha.guarantee import first_copies, repeated_runs
from services.spec import parse_spec
from tests.unit.dpc.fake_node import FakeMessage, FakeNode
from tests.unit.ha.test_upstream_backup import UNION_TEXT, _acks, _feed, _inputs

SPECS = {
    r: parse_spec(
        UNION_TEXT.replace("name: ub2", "name: as").replace(
            "scheme: upstream_backup", f"scheme: active_standby, recovery: {r}, merge: time"
        )
    )
    for r in ("precise", "rollback")
}


class Log:
    """The one log of ``w`` as the replicas write it, one after the other."""

    def __init__(self) -> None:
        self.writers: list[FakeNode] = []
        self.reads: list[int] = []  # the first id of each read of the log

    def written(self) -> list[tuple[Any, int, int, Any]]:
        return [e for n in self.writers for e in n.written("w")]

    def tail(self) -> tuple[int, int]:
        w = self.written()
        last = max((tid for t, tid, _, _ in w if t is STABLE), default=-1)
        bound = max((stime for t, _, stime, _ in w if t is BOUNDARY), default=-1)
        return last, bound

    def stable_after(self, last: int) -> dict[int, Any]:
        self.reads.append(last + 1)
        out = {}
        for n in self.writers:
            out.update({i: v for i, v in n.stable_in(n.outputs.topic("w")) if i > last})
        return out

    def stable(self) -> list[tuple[int, dict]]:
        return [(tid, rec) for t, tid, _, rec in self.written() if t is STABLE]


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Log:
    the_log = Log()
    for mod in (ub, act):
        monkeypatch.setattr(mod, "output_tail", lambda *a: the_log.tail())
    monkeypatch.setattr(act, "stable_after", lambda b, t, p, last: the_log.stable_after(last))
    monkeypatch.setattr("services.node.resume.stable_after", lambda b, t, p, last: the_log.stable_after(last))
    monkeypatch.setattr(ub, "read_acks", lambda *a: _acks(the_log.writers[0]) if the_log.writers else [])
    monkeypatch.setattr(ub, "check_retained", lambda *a: None)
    return the_log


def _role(node: FakeNode, role: str, epoch: int) -> None:
    node.scheme.on_control(RoleOrder("n", 0, node.replica, role=role, epoch=epoch), 0.0)


def _copy_log(src: FakeNode, dst: FakeNode) -> None:
    for t, msgs in src.log.items():
        dst.log[t], dst.offsets[t] = list(msgs), len(msgs)


def _trims(src: FakeNode, dst: FakeNode, seen: int) -> int:
    """Hand the secondary the primary's control messages sent since ``seen``."""
    for c in src.controls[seen:]:
        dst.scheme.on_control(c, 0.0)
    return len(src.controls)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
@pytest.mark.parametrize("recovery", ["precise", "rollback"])
def test_a_takeover_continues_the_log_exactly_wherever_the_secondary_stands(seed: int, recovery: str, log: Log) -> None:
    SPEC = SPECS[recovery]
    rnd = random.Random(seed)
    log.writers.clear()
    ref = FakeNode(SPEC, "n", replica=0)
    msgs = _inputs(ref, ["a", "b"], 50, rnd)
    primary, secondary = FakeNode(SPEC, "n", replica=0), FakeNode(SPEC, "n", replica=1)
    for n in (primary, secondary):
        _copy_log(ref, n)
        n.scheme.on_restart()
        assert isinstance(n.scheme, ActiveStandbyScheme)
        n.scheme.acking.interval_s = 0.0  # cuts and trims at every chance
    _role(primary, "primary", 5)
    log.writers.append(primary)
    want_node = FakeNode(SPEC, "n", replica=0)
    _copy_log(ref, want_node)
    want_node.scheme.on_restart()
    _role(want_node, "primary", 1)
    _feed(want_node, msgs, random.Random(seed + 1))
    want = want_node.stable("w")
    assert want

    join_at = rnd.choice([0, rnd.randint(0, len(msgs))])  # from the start, or later from the newest ack
    fail_at = rnd.randint(join_at, len(msgs))
    i = seen = k = 0
    now = 1.0
    while i < join_at:
        batch = msgs[i : min(join_at, i + rnd.randint(1, 8))]
        primary.step(batch, now)
        i, now = i + len(batch), now + 0.01
    _role(secondary, "secondary", 5)
    start = dict(secondary.consumer.assigned)  # from the start, or from the ack it rebuilt from
    pending = [m for m in msgs if m.offset() >= start[m.topic()]]
    while True:  # the two replicas go at their own pace; the primary fails at fail_at
        now += 0.01
        if i < fail_at and (rnd.random() < 0.5 or k >= len(pending)):
            batch = msgs[i : min(fail_at, i + rnd.randint(1, 8))]
            primary.step(batch, now)
            i += len(batch)
            seen = _trims(primary, secondary, seen)
        elif k < len(pending) and (i < fail_at or rnd.random() < 0.7):
            batch = pending[k : k + rnd.randint(1, 8)]
            secondary.step(batch, now)
            k += len(batch)
        else:
            break
    held = secondary.scheme.held["w"]  # type: ignore[attr-defined]
    trimmed = max((c.ids["w"] for c in primary.controls if c.kind is ControlKind.TRIM), default=-1)
    assert all(e[1] > trimmed for e in held if e[0] is STABLE), "the secondary held what the log already had"
    # The primary fails here; the secondary takes over and reads the rest.
    keeps = secondary.keeps["w"]  # what its heartbeats said its takeover reads back (ha-review D1)
    tail = log.tail()[0]
    log.reads.clear()
    at = secondary.scheme.path.soutputs["w"].next_id  # the secondary's next result
    _role(secondary, "primary", 9)
    log.writers.append(secondary)
    rest: list[FakeMessage] = pending[k:]
    _feed(secondary, rest, rnd)
    got = log.stable()
    where = f"join at {join_at}, failure at {fail_at} of {len(msgs)}, secondary at {k} of {len(pending)}"
    assert all(first >= keeps for first in log.reads), f"{where}: read the log from {log.reads}, said {keeps}"
    if recovery == "precise":
        assert got == want, where
    else:  # the log's tuples since the last trim message (or since the secondary, if behind) come again
        runs = repeated_runs(got)
        assert first_copies(got) == want, where
        assert all(r.start >= min(trimmed + 1, at) and r.stop - 1 <= tail for r in runs), f"{where}: repeated {runs}"
        assert len(runs) <= 1, f"{where}: one rollback per failure, got {runs}"
    assert secondary.states[-1] is NodeState.STABLE


def test_a_secondary_says_its_takeover_reads_back_everything_until_it_has_rebuilt(log: Log) -> None:
    """Told to be secondary, it reports 0 before its role: the coordinator must not trim past the
    ack it is about to rebuild from, whatever the primary reports meanwhile."""
    node = FakeNode(SPECS["precise"], "n", replica=1)
    node.scheme.on_restart()
    beats: list[tuple[dict[str, int], list[tuple[str, int]]]] = []
    node.set_role = lambda role, epoch: beats.append((dict(node.keeps), [(role, epoch)]))  # type: ignore[method-assign]
    _role(node, "secondary", 3)
    assert beats[0] == ({"w": 0}, [("secondary", 3)])
    assert node.keeps == {"w": 0}  # nothing acked: it rebuilds from the inputs' start


@pytest.mark.parametrize("n", [200, 800])
def test_a_secondary_forgets_what_no_cut_can_need(n: int, log: Log) -> None:
    """ha-review D3: a secondary's bookkeeping of its inputs (where each poll read up to, which ids
    each bucket took) is pruned as a primary's is, so it stays the same size however long the
    secondary runs, rather than growing by an entry per poll and per bucket."""
    rnd = random.Random(3)
    secondary = FakeNode(SPECS["precise"], "n", replica=1)
    msgs = _inputs(secondary, ["a", "b"], n, rnd)
    secondary.scheme.on_restart()
    assert isinstance(secondary.scheme, ActiveStandbyScheme)
    secondary.scheme.acking.interval_s = 0.0
    _role(secondary, "secondary", 5)
    now = 1.0
    for i in range(0, len(msgs), 4):
        secondary.step(msgs[i : i + 4], now)
        now += 0.01
    assert secondary.scheme.held["w"], "the secondary processed its input"
    kept = sum(len(inp.reads) + len(inp.buckets) for inp in secondary.scheme.acking.needs.inputs.values())
    assert kept <= 20, f"{kept} entries kept after {len(msgs) // 4} polls"
    assert not secondary.producer.topics[secondary.plan.acks_topic], "a secondary publishes no ack"


def test_a_joining_secondary_holds_nothing_its_log_had_when_it_joined(log: Log) -> None:
    """ha-review D12: before its first trim message a secondary that joined from an ack holds only what
    comes after the log's tail at its join, not its whole catch-up."""
    primary, secondary, msgs = _pair(log, random.Random(5), 120)
    for i in range(0, 160, 4):
        if i == 40:
            primary.scheme.acking.interval_s = 1e9  # type: ignore[attr-defined]  # its newest ack is an old one
        primary.step(msgs[i : i + 4], 1.0 + i / 100)
    tail = log.tail()[0]
    assert tail > 20
    _role(secondary, "secondary", 5)
    start = dict(secondary.consumer.assigned)
    pending = [m for m in msgs if m.offset() >= start[m.topic()]]
    for i in range(0, len(pending), 4):
        secondary.step(pending[i : i + 4], 3.0 + i / 100)
    held = [e[1] for e in secondary.scheme.held["w"] if e[0] is STABLE]  # type: ignore[attr-defined]
    assert held and min(held) > tail, f"held {held[:3]}... with the log at {tail} when it joined"


def test_a_trim_message_counts_only_from_the_primary_of_the_epoch_the_secondary_was_told(log: Log) -> None:
    """ha-review D14: a replaced primary's trim (a zombie's), or any trim a candidate reads, must not
    make a secondary drop results its primary's log may never hold."""
    node = FakeNode(SPECS["precise"], "n", replica=1)
    node.scheme.on_restart()
    scheme = node.scheme
    assert isinstance(scheme, ActiveStandbyScheme)
    scheme.on_control(Trim("n", 0, 0, epoch=3, ids={"w": 50}), 0.0)  # read as a candidate
    assert scheme.logged["w"] == -1
    _role(node, "secondary", 5)
    scheme.on_control(Trim("n", 0, 0, epoch=4, ids={"w": 60}), 0.0)  # a replaced primary's
    assert scheme.logged["w"] == -1
    scheme.on_control(Trim("n", 0, 0, epoch=5, ids={"w": 70}), 0.0)
    assert scheme.logged["w"] == 70


def test_a_secondary_needs_its_input_from_where_it_reads_and_a_new_primary_all_until_its_acks(log: Log) -> None:
    """ha-review D4: the coordinator trims an active standby node's input no further than its secondary
    reads, nor, after a takeover, than the old primary's last ack a joining secondary rebuilds from."""
    rnd = random.Random(11)
    node = FakeNode(SPECS["precise"], "n", replica=1)
    msgs = _inputs(node, ["a", "b"], 60, rnd)
    node.scheme.on_restart()
    scheme = node.scheme
    assert isinstance(scheme, ActiveStandbyScheme)
    _role(node, "secondary", 5)
    topics = {p.topic for p in node.inputs.ports}
    assert node.needs == {t: 0 for t in topics}  # nothing acked: from the start
    for i in range(0, 40, 4):
        node.step(msgs[i : i + 4], 1.0 + i / 100)
    read = {t: max((m.offset() + 1 for m in msgs[:40] if m.topic() == t), default=0) for t in topics}
    assert node.needs == read
    _role(node, "primary", 6)
    assert node.needs == {t: 0 for t in topics} and node.keeps == {"w": 0}


def _pair(log: Log, rnd: random.Random, n: int) -> tuple[FakeNode, FakeNode, list[FakeMessage]]:
    """Replica 0 primary at epoch 5 (writing ``log``) and replica 1 not told its role yet, cuts and trims
    at every chance, and ``n`` readings per input for them."""
    primary, secondary = FakeNode(SPECS["precise"], "n", replica=0), FakeNode(SPECS["precise"], "n", replica=1)
    msgs = _inputs(primary, ["a", "b"], n, rnd)
    _copy_log(primary, secondary)
    for node in (primary, secondary):
        node.scheme.on_restart()
        node.scheme.acking.interval_s = 0.0  # type: ignore[attr-defined]
    _role(primary, "primary", 5)
    log.writers.append(primary)
    return primary, secondary, msgs


def _primary_and_secondary(log: Log, rnd: random.Random, n: int) -> tuple[FakeNode, FakeNode, list[FakeMessage]]:
    """``_pair`` with replica 1 its secondary at epoch 5."""
    primary, secondary, msgs = _pair(log, rnd, n)
    _role(secondary, "secondary", 5)
    return primary, secondary, msgs


def test_a_secondary_told_no_trims_stops_reading_at_its_bound_and_reads_on_once_trimmed(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ha-review D12: a primary that is stuck but not failed sends no trim messages; its secondary
    holds at most about ``MAX_HELD`` results, then reads no input until a trim (or its takeover)."""
    monkeypatch.setattr(act, "MAX_HELD", 20)
    rnd = random.Random(3)
    primary, secondary, msgs = _primary_and_secondary(log, rnd, 80)
    scheme = secondary.scheme
    assert isinstance(scheme, ActiveStandbyScheme)
    most, now = 0, 1.0
    for i in range(0, len(msgs), 4):
        if secondary.inputs.held:
            break  # it reads nothing more: the poll is paused
        secondary.step(msgs[i : i + 4], now)
        most, now = max(most, len(scheme.held["w"])), now + 0.01
    assert secondary.inputs.held and secondary.consumer.holding, "it went on reading with no trim"
    assert most < 20 + 4 * 8, f"held {most} results"
    _feed(primary, msgs, rnd)
    _trims(primary, secondary, 0)
    secondary.step([], now)
    assert not secondary.inputs.held and not secondary.consumer.holding and len(scheme.held["w"]) <= 10


def test_a_new_primary_says_it_reads_back_everything_from_the_moment_it_says_primary(log: Log) -> None:
    """Its heartbeats say primary while it takes over; what it said as a secondary (where it reads, far
    ahead) is no primary's restart point: the coordinator trimmed the input to it, and a takeover
    after this one was killed in its own found the input gone (HA schedule seed 23)."""
    rnd = random.Random(5)
    primary, secondary, msgs = _primary_and_secondary(log, rnd, 60)
    _feed(primary, msgs, rnd)
    _feed(secondary, msgs, rnd)
    assert any(off > 0 for off in secondary.needs.values()), "a secondary says where it reads"
    said: list[tuple[dict[str, int], dict[str, int], str]] = []
    secondary.set_role = lambda role, epoch: said.append((dict(secondary.keeps), dict(secondary.needs), role))  # type: ignore[method-assign]
    _role(secondary, "primary", 9)
    keeps, needs, role = said[0]
    assert role == "primary" and set(keeps.values()) == {0} and set(needs.values()) == {0}, said[0]
