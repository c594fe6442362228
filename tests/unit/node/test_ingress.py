"""The ingress node without Kafka: any client's plain records become a stream with dense ids,
the same on every replica; late, malformed and misplaced records are dead-lettered with why."""

from __future__ import annotations

import json
from typing import Any

from services.client.source import END_OF_TIME
from services.core.tuples import BOUNDARY, make_headers, read_headers
from services.node.metrics import reason_label
from services.operators.reference import evaluate
from services.spec import Spec, parse_spec
from tests.unit.dpc.fake_node import FakeMessage, FakeNode

SPEC_TEXT = """\
name: ing
defaults: {{replicas: 2, partitions: {partitions}}}
streams:
  r: {{schema: reading, key: sensor, ingress: {ingress}}}
  hot: {{schema: reading, key: sensor}}
operators:
  warm: {{type: filter, input: r, output: hot, where: "value >= 20"}}
nodes:
  n: {{operators: [warm]}}
"""
LATE_BY_TS = "{time: ts, lateness: 50}"


def spec(partitions: int = 1, ingress: str = LATE_BY_TS) -> Spec:
    return parse_spec(SPEC_TEXT.format(partitions=partitions, ingress=ingress))


SPEC = spec()


def rec(i: int, ts: int) -> dict[str, Any]:
    return {"sensor": f"s{i % 3}", "ts": ts, "value": float(10 + i % 30), "seq": i}


def feed(node: FakeNode) -> list[FakeMessage]:
    """Two producers' records interleaved (times a little out of order), one late, two malformed, then the end."""
    out = []
    for i in range(40):
        ts = 1000 + 10 * i - (15 if i % 2 else 0)  # the second producer runs 15 ms behind
        out.append(node.raw("r", json.dumps(rec(i, ts)).encode()))
    out.append(node.raw("r", json.dumps(rec(99, 1100)).encode()))  # 1100 < 1390 - 50: late
    out.append(node.raw("r", b"{not json"))
    out.append(node.raw("r", json.dumps({"sensor": "s1", "value": 3.0, "seq": 1}).encode()))  # no time
    out.append(node.raw("r", None, make_headers(BOUNDARY, -1, END_OF_TIME)))
    return out


def test_two_replicas_cut_into_different_polls_write_the_same_stable_stream() -> None:
    written = []
    for cuts in ([44], [3, 17, 30, 44], list(range(1, 45))):
        node = FakeNode(SPEC, "ingress_r")
        msgs = feed(node)
        start = 0
        for cut in cuts:
            node.step(msgs[start:cut], float(cut))
            start = cut
        written.append(node.stable("r"))
        reasons = [h["ht.error"].decode() for h in node.deadletters()]
        assert len(reasons) == 3, reasons
        assert "late: tuple time 1100 is 230 ms behind" in reasons[0]
        assert "not JSON" in reasons[1] and "tuple time ts=None" in reasons[2]
        assert reason_label(reasons[0]) == "late", "counted where metrics read it"
    assert written[0] == written[1] == written[2]
    ids = [tid for tid, _ in written[0]]
    assert ids == list(range(40)), "dense ids from 0"
    taken = [json.loads(m.value()) for m in feed(FakeNode(SPEC, "ingress_r"))[:40]]  # type: ignore[arg-type]
    want = evaluate(SPEC, {"r.raw": [taken]}, ended=True)["r"][0]
    assert sorted((r["ts"], r["seq"]) for _, r in written[0]) == sorted((r["ts"], r["seq"]) for r in want)


def test_a_record_in_the_wrong_partition_is_deadlettered() -> None:
    node = FakeNode(spec(partitions=2), "ingress_r", partition=0)
    keys = [f"s{i}" for i in range(8)]
    msgs = [node.raw("r", json.dumps(rec(i, 1000 + i) | {"sensor": k}).encode()) for i, k in enumerate(keys)]
    node.step(msgs, 0.0)
    reasons = [h["ht.error"].decode() for h in node.deadletters()]
    from services.core.partitioner import key_bytes, partition_for

    wrong = [k for k in keys if partition_for(key_bytes(k), 2) != 0]
    assert wrong and len(reasons) == len(wrong)
    assert all("belongs in partition 1" in r for r in reasons)


def test_an_idle_raw_partition_gets_ticks_that_move_its_time_on() -> None:
    node = FakeNode(spec(partitions=2, ingress="{idle: 200}"), "ingress_r")
    raw = node.inputs.ports[0].raw
    assert raw is not None and raw.time is None, "the record timestamp is the tuple time"
    node.step([], raw.last_read + 0.1)
    assert node.producer.topics["ing.r.raw"] == [], "not idle long enough"
    node.step([], raw.last_read + 0.3)
    ticks = node.producer.topics["ing.r.raw"]
    assert len(ticks) == 1 and read_headers(ticks[0].headers)[0] is BOUNDARY
    msg = FakeMessage("ing.r.raw", None, ticks[0].headers, node.offsets["ing.r.raw"])
    node.step([msg], raw.last_read + 0.35)
    assert node.scheme.path.sunion.boundaries[0] == read_headers(ticks[0].headers)[2]
