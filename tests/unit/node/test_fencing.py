"""Fenced writers, seen from a downstream node: what a replaced copy of an upstream replica writes
after its successor announced a newer epoch never reaches the node's operators."""

from __future__ import annotations

import pickle
from typing import Any

from services.client.workload import readings
from services.core.codec import codec_for
from services.core.tuples import EPOCH, UNDO, HeaderWriter, TupleType, header_writer
from tests.unit.dpc.fake_node import BOUNDARY, CHAIN, STABLE, TENTATIVE, FakeMessage, FakeNode

OLD, NEW = header_writer(0, epoch=3), header_writer(0, epoch=5)


def _msg(
    node: FakeNode, w: HeaderWriter, ttype: TupleType, tid: int, stime: int, rec: dict | None = None
) -> FakeMessage:
    """One message of n1.r0's topic, as writer ``w`` writes it."""
    port = node.inputs.ports[0]
    value = codec_for("reading").encode(rec) if rec is not None else None
    off = node.offsets[port.topic]
    node.offsets[port.topic] += 1
    return FakeMessage(port.topic, value, w(ttype, tid, stime), off, node.partition)


def _upstream_log(node: FakeNode, zombie: bool) -> list[FakeMessage]:
    """n1.r0 (epoch 3) writes stable 0..4; a new incarnation (epoch 5) takes over and writes 5..9.
    With ``zombie``, the replaced copy is resumed right after the takeover and writes its own
    stable 5 and 6 (other values), a tentative 7 and an UNDO."""
    recs = list(readings(10, sensors=2, seed=1, step_ms=10, start_ms=0))
    log = [_msg(node, OLD, STABLE, i, r["ts"], r) for i, r in enumerate(recs[:5])]
    log += [_msg(node, OLD, BOUNDARY, 4, recs[4]["ts"] + 1)]
    log += [_msg(node, NEW, EPOCH, -1, 0), _msg(node, NEW, UNDO, 4, 0)]
    if zombie:
        log += [_msg(node, OLD, STABLE, i, r["ts"], dict(r, value=-1.0)) for i, r in enumerate(recs[5:7], 5)]
        log += [_msg(node, OLD, TENTATIVE, 7, recs[7]["ts"], recs[7]), _msg(node, OLD, UNDO, 4, 0)]
    log += [_msg(node, NEW, STABLE, i, r["ts"], r) for i, r in enumerate(recs[5:], 5)]
    log += [_msg(node, NEW, BOUNDARY, 9, 10**6)]
    return log


def test_a_downstream_port_ignores_a_replaced_upstream_writer() -> None:
    failure_free, node = FakeNode(CHAIN, "n2"), FakeNode(CHAIN, "n2")
    failure_free.step(_upstream_log(failure_free, zombie=False), 0.0)
    node.step(_upstream_log(node, zombie=True), 0.0)
    assert node.stable("c") == failure_free.stable("c") and len(node.stable("c")) == 10
    assert node.written("c") == failure_free.written("c"), "nothing of the replaced writer comes out"
    assert node.stats.skipped.get("fenced") == 4
    assert node.deadletters() == []


def test_a_restart_image_that_counts_output_the_topic_lacks_is_not_used(monkeypatch: Any) -> None:
    """A replaced copy wrote stable 6..9 after its successor's EPOCH (fenced: readers dropped them)
    and then its restart image, counting them. A restart from that image would go on at 10 and
    leave 6..9 missing for good; it must start from its inputs and write 6..9."""
    from services.node import resume

    recs = list(readings(10, sensors=2, seed=1, step_ms=10, start_ms=0))
    zombie = FakeNode(CHAIN, "n1")
    msgs = [zombie.message("a", STABLE, i, r["ts"], r) for i, r in enumerate(recs)]
    msgs.append(zombie.message("a", BOUNDARY, 9, 10**6))
    zombie.scheme.next_image = 0.0
    zombie.step(msgs, 0.0)
    written = zombie.producer.topics[zombie.scheme.restart_topic][-1].value
    assert written is not None
    image = pickle.loads(written)
    assert image.outputs["b"][0] == 10
    topic = zombie.outputs.topic("b")
    live = [(tid, held) for tid, held in zombie.stable_in(topic) if tid <= 5]  # what readers take of the topic

    node = FakeNode(CHAIN, "n1")
    monkeypatch.setattr(resume.restart, "load", lambda *a: image)
    monkeypatch.setattr(resume, "first_offset", lambda *a: 0)
    monkeypatch.setattr(resume, "last_stable_id", lambda *a: 5)
    monkeypatch.setattr(resume, "stable_after", lambda b, t, p, last: {i: h for i, h in live if i > last})
    offsets = node.scheme.on_restart()
    assert offsets == {}, "the restart replays its inputs from their start"
    node.step([FakeMessage(m.topic(), m.value(), m.headers(), m.offset()) for m in msgs], 0.0)
    assert [tid for tid, _ in node.stable("b")] == [6, 7, 8, 9]
    assert node.stable("b") == zombie.stable("b")[6:]
