"""Which logs the coordinator trims for upstream backup, and how far: only logs that upstream
backup nodes alone read, at the oldest ack of their current primaries, never backwards."""

from __future__ import annotations

from services.coordinator.trims import Trims, trimmable
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
  a: {operators: [keep], ha: upstream_backup}
  b: {operators: [win], ha: upstream_backup}
  c: {operators: [copy2], ha: upstream_backup}
  d: {operators: [copy], replicas: 2}
""")


def _ack(node: str, epoch: int, offsets: dict[str, int], ms: int = 0) -> Ack:
    return Ack(node, 0, epoch, 1000, {}, offsets, {}, ms)


def test_only_logs_that_upstream_backup_nodes_alone_read_are_trimmed() -> None:
    got = trimmable(SPEC)
    # src is read by a and c (both upstream backup), mid by b; other is read by d (dpc);
    # out and side are sinks (applications read them).
    assert got == {"tr.src": ["a", "c"], "tr.mid": ["b"]}


def test_a_log_is_trimmed_at_the_oldest_current_ack_and_never_back() -> None:
    trims = Trims(SPEC)
    epochs = {"a": 3, "b": 5, "c": 4}

    def epoch(n: str, p: int) -> int:
        return epochs[n]

    trims.heard(_ack("a", 3, {"tr.src": 120}))
    assert trims.due(epoch) == {}  # c has not acked src
    trims.heard(_ack("c", 4, {"tr.src": 80}))
    trims.heard(_ack("b", 5, {"tr.mid": 40}))
    assert trims.due(epoch) == {("tr.src", 0): 80, ("tr.mid", 0): 40}
    trims.trimmed(("tr.src", 0), 80)
    trims.trimmed(("tr.mid", 0), 40)
    assert trims.due(epoch) == {}  # nothing new
    trims.heard(_ack("c", 4, {"tr.src": 70}, ms=-1))  # an older ack read late: ignored
    trims.heard(_ack("c", 4, {"tr.src": 150}, ms=5))
    assert trims.due(epoch) == {("tr.src", 0): 120}
    epochs["c"] = 6  # c was taken over and its new primary has not acked: src keeps what it has
    assert trims.due(epoch) == {}
    assert trims.table() == {"tr.mid[0]": 40, "tr.src[0]": 80}
