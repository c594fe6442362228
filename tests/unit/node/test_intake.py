"""The intake keeps bad input and bugs apart: what cannot be read is dead-lettered with the reason,
and what goes wrong in the node once a message is read stops the node, never passing for
malformed input."""

from __future__ import annotations

import pytest

from services.node.intake import Intake
from tests.unit.dpc.fake_node import BOUNDARY, STABLE, FakeNode
from tests.unit.dpc.test_scheme import MERGE_AFTER_WINDOW, readings


class SUnionBug(ValueError):
    """A ValueError, the very type bad input raises too, from inside SUnion."""


def _broken(*_: object) -> None:
    raise SUnionBug("a bug in SUnion")


@pytest.mark.parametrize("where", ["push", "boundary"])
def test_a_bug_in_sunion_stops_the_node_and_is_not_dead_lettered(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    node = FakeNode(MERGE_AFTER_WINDOW, "n")  # two inputs: every message goes through the general path
    rec = readings(1, 1, 0)[0]
    monkeypatch.setattr(node.scheme.path.sunion, where, _broken)
    msgs = [node.message("a", STABLE, 0, 10, dict(rec, ts=10)), node.message("a", BOUNDARY, 0, 20)]
    with pytest.raises(SUnionBug):
        node.step(msgs, 0.0)
    assert node.deadletters() == [] and node.stats.deadlettered == 0


def test_a_message_that_cannot_be_read_is_dead_lettered_and_the_rest_goes_on() -> None:
    node = FakeNode(MERGE_AFTER_WINDOW, "n")
    rec = readings(2, 1, 0)
    good = node.message("a", STABLE, 0, 10, dict(rec[0], ts=10))
    bad = node.message("a", STABLE, 1, 11, dict(rec[1], ts=11))
    bad._value = b"\xff not avro"
    node.step([good, bad], 0.0)
    reasons = [h["ht.error"].decode() for h in node.deadletters()]
    assert len(reasons) == 1 and node.stats.deadlettered == 1
    assert node.inputs.ports[0].last_stable == 0  # the good one was taken


def test_a_scheme_that_asks_sees_where_each_input_stands_after_a_poll() -> None:
    node = FakeNode(MERGE_AFTER_WINDOW, "n")
    recs = readings(3, 1, 0)
    msgs = [node.message("a", STABLE, i, 10 + i, dict(r, ts=10 + i)) for i, r in enumerate(recs)]
    topic = msgs[0].topic()
    assert node.intake.take(msgs[:1], 0.0).positions == {}, "only a scheme that asks for them"  # type: ignore[arg-type]
    batch = Intake(node, node.scheme.path, positions=True).take(msgs[1:], 0.0)  # type: ignore[arg-type]
    assert batch.messages == 2 and batch.positions == {topic: msgs[-1].offset() + 1}


def test_a_scheme_that_asks_gets_each_tuple_with_its_input_offset() -> None:
    node = FakeNode(MERGE_AFTER_WINDOW, "n")
    recs = readings(3, 1, 0)
    msgs = [node.message("a", STABLE, i, 10 + i, dict(r, ts=10 + i)) for i, r in enumerate(recs)]
    Intake(node, node.scheme.path, positions=True).take(msgs, 0.0)  # type: ignore[arg-type]
    held = [t for b in node.scheme.path.sunion.pending.values() for t in b.tuples]
    assert [(t.id, t.offset) for t in held] == [(m_id, m.offset()) for m_id, m in enumerate(msgs)]
    node.step([node.message("a", STABLE, 3, 13, dict(recs[0], ts=13))], 0.0)  # a scheme that does not ask
    assert [t.offset for b in node.scheme.path.sunion.pending.values() for t in b.tuples][-1] == -1
