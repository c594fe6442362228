"""Which logs the coordinator trims for upstream backup, and how far: only logs that upstream
backup nodes alone read, at the oldest ack of their current primaries, never backwards, and never
past what the log's writer reads back at a takeover (ha-review D1)."""

from __future__ import annotations

from collections.abc import Callable

from services.control.messages import Heartbeat
from services.control.states import NodeState, Role
from services.coordinator.trims import LIMIT_EVERY_S, Point, Trims, trimmable
from services.ha.acks import Ack
from services.spec import parse_spec

SPEC = parse_spec("""\
name: tr
streams:
  src: {schema: reading, key: sensor}
  mid: {schema: reading, key: sensor}
  out: {schema: window_stat, key: key}
  other: {schema: reading, key: sensor}
  side: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: src, output: mid, where: "value > 0"}
  win: {type: window, input: mid, output: out, key: sensor, size: 300, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  copy: {type: filter, input: other, output: side, where: "True"}
  copy2: {type: filter, input: src, output: other, where: "True"}
nodes:
  a: {operators: [keep], replicas: 2, ha: upstream_backup}
  b: {operators: [win], ha: upstream_backup}
  c: {operators: [copy2], ha: upstream_backup}
  d: {operators: [copy], replicas: 2}
""")


def _ack(node: str, epoch: int, offsets: dict[str, int], ms: int = 0) -> Ack:
    return Ack(node, 0, epoch, 1000, {}, offsets, {}, ms)


def _beat(node: str, replica: int, role: Role, epoch: int, keeps: dict[str, int], ms: int = 1) -> Heartbeat:
    return Heartbeat(node, 0, replica, NodeState.STABLE, ms, epoch, role=role.value, keeps=keeps)


def _roles(table: dict[int, Role]) -> Callable[[str, int, int], Role | None]:
    return lambda node, p, r: table.get(r)


def test_only_logs_that_upstream_backup_nodes_alone_read_are_trimmed() -> None:
    got = trimmable(SPEC)
    # src is read by a and c (both upstream backup), mid by b; other is read by d (dpc);
    # out and side are sinks (applications read them).
    assert got == {"tr.src": ["a", "c"], "tr.mid": ["b"]}


def test_a_log_is_trimmed_at_the_oldest_current_ack_and_never_back() -> None:
    trims = Trims(SPEC)
    epochs = {"a": 3, "b": 5, "c": 4}
    role = _roles({0: Role.PRIMARY})

    def epoch(n: str, p: int) -> int:
        return epochs[n]

    def due() -> dict[tuple[str, int], int]:
        return {k: pt.offset for k, pt in trims.due(epoch, role).items()}

    trims.reported(_beat("a", 0, Role.PRIMARY, 3, {"mid": 10**6}))  # mid's writer reads back little
    trims.heard(_ack("a", 3, {"tr.src": 120}))
    assert due() == {}  # c has not acked src
    trims.heard(_ack("c", 4, {"tr.src": 80}))
    trims.heard(_ack("b", 5, {"tr.mid": 40}))
    assert due() == {("tr.src", 0): 80, ("tr.mid", 0): 40}
    trims.trimmed(("tr.src", 0), 80)
    trims.trimmed(("tr.mid", 0), 40)
    assert due() == {}  # nothing new
    trims.heard(_ack("c", 4, {"tr.src": 70}, ms=-1))  # an older ack read late: ignored
    trims.heard(_ack("c", 4, {"tr.src": 150}, ms=5))
    assert due() == {("tr.src", 0): 120}
    epochs["c"] = 6  # c was taken over and its new primary has not acked: src keeps what it has
    assert due() == {}
    assert trims.table() == {"tr.mid[0]": 40, "tr.src[0]": 80}


def _mid_due(trims: Trims, epoch: int, roles: dict[int, Role]) -> Point | None:
    return trims.due(lambda n, p: epoch if n == "a" else 5, _roles(roles)).get(("tr.mid", 0))


def test_a_log_is_not_trimmed_until_its_writers_current_primary_says_what_a_takeover_reads_back() -> None:
    trims = Trims(SPEC)
    trims.heard(_ack("b", 5, {"tr.mid": 40}))
    primary = {0: Role.PRIMARY, 1: Role.SECONDARY}
    assert _mid_due(trims, 3, primary) is None  # a (passive, active or upstream writer) said nothing
    trims.reported(_beat("a", 1, Role.SECONDARY, 3, {"mid": 50}))
    assert _mid_due(trims, 3, primary) is None  # a secondary alone does not do
    trims.reported(_beat("a", 0, Role.PRIMARY, 2, {"mid": 70}))
    assert _mid_due(trims, 3, primary) is None  # a replaced primary's report does not do
    trims.reported(_beat("a", 0, Role.PRIMARY, 3, {"mid": 70}, ms=2))
    assert _mid_due(trims, 3, primary) == Point(40, 50)  # the least of the primary's and the live secondary's
    assert _mid_due(trims, 3, {0: Role.PRIMARY, 1: Role.FAILED}) == Point(40, 70)  # a failed one holds nothing
    trims.reported(_beat("a", 1, Role.SECONDARY, 3, {"mid": 0}, ms=3))  # an active standby about to rebuild
    assert _mid_due(trims, 3, primary) is None
    trims.reported(_beat("a", 1, Role.SECONDARY, 3, {"mid": 60}, ms=1))  # older than the last one: ignored
    assert _mid_due(trims, 3, primary) is None
    assert _mid_due(trims, 4, primary) is None  # a takeover: its new primary has not reported


def test_a_source_or_an_amnesia_writer_needs_only_the_tail_and_a_dpc_writer_is_not_trimmed() -> None:
    spec = parse_spec("""\
name: tw
streams:
  src: {schema: reading, key: sensor}
  x: {schema: reading, key: sensor}
  y: {schema: reading, key: sensor}
  o1: {schema: reading, key: sensor}
  o2: {schema: reading, key: sensor}
operators:
  f: {type: filter, input: src, output: x, where: "True"}
  g: {type: filter, input: src, output: y, where: "True"}
  h: {type: filter, input: x, output: o1, where: "True"}
  i: {type: filter, input: y, output: o2, where: "True"}
nodes:
  am: {operators: [f], ha: amnesia}
  dp: {operators: [g]}
  u1: {operators: [h], ha: upstream_backup}
  u2: {operators: [i], ha: upstream_backup}
""")
    trims = Trims(spec)
    assert set(trims.readers) == {"tw.x"}  # y's writer is a DPC node (its restart images are not reported)
    trims.heard(Ack("u1", 0, 1, 1000, {}, {"tw.x": 30}, {}, 0))
    assert trims.due(lambda n, p: 1, _roles({})) == {("tw.x", 0): Point(30, None)}


def test_a_limit_read_for_an_older_restart_point_serves_until_it_is_due_again_and_a_newer_ones_never() -> None:
    trims, key = Trims(SPEC), ("tr.mid", 0)
    assert trims.limited(key, Point(40, 50), 0.0) is None  # nothing read yet
    assert trims.read_limit(key, Point(40, 50), 30, 0.0) == 30  # the writer needs from offset 30 on
    assert trims.limited(key, Point(25, 50), 0.1) == 25  # within the limit read: no read
    assert trims.limited(key, Point(45, 60), 0.1) == 30  # a later point: the limit read still holds
    assert trims.limited(key, Point(45, 60), LIMIT_EVERY_S + 0.1) is None  # read again, at most this often
    assert trims.limited(key, Point(20, 40), 0.1) is None  # a secondary reads back older ids: read again
    assert trims.limited(key, Point(20, None), 0.1) == 20


STANDBY = parse_spec("""\
name: ts
streams:
  src: {schema: reading, key: sensor}
  o1: {schema: reading, key: sensor}
  o2: {schema: reading, key: sensor}
operators:
  f: {type: filter, input: src, output: o1, where: "True"}
  g: {type: filter, input: src, output: o2, where: "True"}
nodes:
  ps: {operators: [f], replicas: 2, ha: passive_standby}
  act: {operators: [g], replicas: 2, ha: active_standby}
""")


def test_a_log_passive_and_active_standby_nodes_read_is_trimmed_at_what_their_replicas_need() -> None:
    """ha-review D4: the paper's passive and active standby trim their upstream queues too: here at the
    oldest input offset their replicas' heartbeats say a recovery reads again (a passive standby's
    newest written checkpoint, an active standby's ack for a joining secondary, where its secondary
    reads), never while a reader's current primary has not said."""
    trims = Trims(STANDBY)
    assert list(trims.readers) == ["ts.src"]
    roles = _roles({0: Role.PRIMARY, 1: Role.SECONDARY})

    def due() -> dict[tuple[str, int], Point]:
        return trims.due(lambda n, p: 2, roles)

    trims.reported(Heartbeat("ps", 0, 0, NodeState.STABLE, 1, 2, role="primary", needs={"ts.src": 300}))
    assert due() == {}  # act has not said
    trims.reported(Heartbeat("act", 0, 0, NodeState.STABLE, 1, 2, role="primary", needs={"ts.src": 250}))
    assert due() == {("ts.src", 0): Point(250, None)}
    trims.reported(Heartbeat("act", 0, 1, NodeState.STABLE, 2, 2, role="secondary", needs={"ts.src": 120}))
    assert due() == {("ts.src", 0): Point(120, None)}  # its secondary reads behind
    assert trims.due(lambda n, p: 3, roles) == {}  # a takeover: the new primaries have not said


EXCHANGE = parse_spec("""\
name: tx
streams:
  src: {schema: reading, key: sensor, partitions: 2}
  mid: {schema: reading, key: sensor, partitions: 2}
  out: {schema: window_stat, key: key, partitions: 3}
operators:
  keep: {type: filter, input: src, output: mid, where: "value > 0"}
  win: {type: window, input: mid, output: out, key: sensor, size: 300, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  a: {operators: [keep], replicas: 2, ha: upstream_backup}
  b: {operators: [win], replicas: 2, ha: upstream_backup}
""")


def test_across_an_exchange_each_connection_is_trimmed_by_its_consumer_and_kept_by_its_producer() -> None:
    """mid crosses an exchange (2 -> 3 partitions): its logs are tx.mid.p0 and tx.mid.p1, and partition i
    of tx.mid.p<j> is the connection from producer partition j to consumer partition i. It is trimmed by
    what consumer partition i's acks say of it, never past what producer partition j's takeover reads
    back of that connection (its heartbeats' ``keeps`` name the connection's output, mid->i)."""
    trims = Trims(EXCHANGE)
    assert trims.readers == {"tx.src": ["a"], "tx.mid.p0": ["b"], "tx.mid.p1": ["b"]}
    assert trims.partitions["tx.mid.p1"] == 3
    role = _roles({0: Role.PRIMARY})
    for p in range(3):  # consumer partition p has read 100 * (p + 1) of each connection to it
        trims.heard(Ack("b", p, 7, 1000, {}, {"tx.mid.p0": 100 * (p + 1), "tx.mid.p1": 100 * (p + 1)}, {}, 0))
    for j in range(2):  # producer partition j's takeover reads back each connection from id 10 * (j + 1)
        keeps = {f"mid->{i}": 10 * (j + 1) for i in range(3)}
        trims.reported(Heartbeat("a", j, 0, NodeState.STABLE, 1, 4, role="primary", keeps=keeps))
    due = trims.due(lambda n, p: 7 if n == "b" else 4, role)
    assert due == {(f"tx.mid.p{j}", i): Point(100 * (i + 1), 10 * (j + 1)) for j in range(2) for i in range(3)}
