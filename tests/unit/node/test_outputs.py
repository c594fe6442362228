"""Boundaries riding on data: a batch that ends with results and the frontier past them is written
as the results alone, the last one carrying the boundary (``ht.bound``), and every reader takes it
as the BOUNDARY it replaces."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from services.client.workload import readings
from services.core.tuples import UNDO, carries_bound, make_headers, read_headers, with_bound
from services.node import outputs as outputs_module
from tests.unit.dpc.fake_node import BOUNDARY, CHAIN, STABLE, FakeMessage, FakeNode, source_messages

END = 10**6


def _feed_n1(node: FakeNode, cuts: int) -> None:
    """n1 gets 40 readings, a boundary after every 3, in polls of ``cuts`` messages, then the end."""
    recs = list(readings(40, sensors=2, seed=3, step_ms=40, start_ms=0))
    msgs = source_messages(node, "a", recs, boundary_every=3) + [node.message("a", BOUNDARY, 39, END)]
    for i in range(0, len(msgs), cuts):
        node.step(msgs[i : i + cuts], 0.0)
    node.step([], 0.0)


def _records(node: FakeNode, stream: str) -> list[Any]:
    return node.producer.topics[node.outputs.topic(stream)]


def _as_input(of: FakeNode, stream: str, to: FakeNode) -> list[FakeMessage]:
    """What ``of`` wrote to ``stream``, as the messages ``to``'s port reads, headers and all."""
    topic = to.inputs.ports[0].topic
    return [FakeMessage(topic, w.value, w.headers, i) for i, w in enumerate(_records(of, stream))]


def _uncoalesced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outputs_module, "_carrier", lambda q: None)


@pytest.mark.parametrize("cuts", [2, 4, 1000])  # one message a poll: n1 (one input) sends each result at once
def test_a_boundary_rides_on_the_last_result_of_a_batch_and_readers_see_the_same_stream(
    monkeypatch: pytest.MonkeyPatch, cuts: int
) -> None:
    coalesced = FakeNode(CHAIN, "n1")
    _feed_n1(coalesced, cuts)
    with monkeypatch.context() as m:
        _uncoalesced(m)
        apart = FakeNode(CHAIN, "n1")
        _feed_n1(apart, cuts)

    assert coalesced.written("b") == apart.written("b"), "the same tuples and boundaries, as a reader takes them"
    carried = [w for w in _records(coalesced, "b") if carries_bound(w.headers)]
    standalone = sum(1 for w in _records(coalesced, "b") if read_headers(w.headers)[0] is BOUNDARY)
    assert carried, "boundaries after results ride on them"
    assert len(_records(coalesced, "b")) == len(_records(apart, "b")) - len(carried)
    assert standalone == sum(1 for t, *_ in apart.written("b") if t is BOUNDARY) - len(carried)
    assert all(read_headers(w.headers)[0] is STABLE for w in carried)

    downstream, reference = FakeNode(CHAIN, "n2"), FakeNode(CHAIN, "n2")
    downstream.step(_as_input(coalesced, "b", downstream), 0.0)
    reference.step(_as_input(apart, "b", reference), 0.0)
    assert downstream.written("c") == reference.written("c")
    assert len(downstream.stable("c")) == 40
    assert downstream.scheme.path.sunion.boundaries == [END], "the end reached n2 riding on n1's last result"


def test_write_leaves_only_its_own_batch_unacknowledged_and_flush_none() -> None:
    """``write`` waits for what the last write sent, then sends without waiting; ``flush`` waits for all,
    also when it has nothing of its own to send."""
    node = FakeNode(CHAIN, "n1")
    producer, q, topic = node.producer, node.outputs.queue("b"), node.outputs.topic("b")
    sent = 0
    for batch in range(3):
        q += [(STABLE, sent + i, 100 * batch + i, (b"v", None)) for i in range(4)]
        node.outputs.write()
        assert producer.acked_in(topic) == sent, "what earlier writes sent is acknowledged, this batch is not"
        sent += 4
    assert node.outputs.flush() == 0
    assert producer.acked_in(topic) == sent == 12


@pytest.mark.parametrize("full", [True, False])
def test_a_dpc_node_leaves_a_full_turns_output_in_flight_until_the_next_turn(full: bool) -> None:
    """After a full poll more input is waiting: the loop writes a DPC node's results without waiting
    (``overlap_writes``) and the next turn waits for them. A turn that caught up with its input
    waits at once. (HA schemes always wait: ``test_upstream_backup``.)"""
    node = FakeNode(CHAIN, "n1")
    recs = list(readings(6, sensors=2, seed=1, step_ms=50, start_ms=0))
    msgs = source_messages(node, "a", recs, boundary_every=2)
    node.settings = dataclasses.replace(node.settings, batch_size=len(msgs) + (0 if full else 1))
    node.step(msgs, 0.0)
    topic = node.outputs.topic("b")
    written = len(node.producer.topics[topic])
    assert written and (node.producer.acked_in(topic) < written) is full
    node.step([], 0.0)
    assert node.producer.acked_in(topic) == written


def test_a_boundary_with_no_result_before_it_is_a_record_of_its_own() -> None:
    node = FakeNode(CHAIN, "n1")
    q = node.outputs.queue("b")
    q += [(UNDO, 4, 0, None), (BOUNDARY, 4, 500, None)]
    node.outputs.flush()
    assert [read_headers(w.headers)[:3] for w in _records(node, "b")] == [(UNDO, 4, 0), (BOUNDARY, 4, 500)]


def test_a_reader_that_has_the_tuple_a_boundary_rode_on_still_takes_the_boundary() -> None:
    """After a switch a port may read again the last stable tuple it has (the seek goes back to it
    when a boundary rides on it): the tuple is a duplicate, the boundary is news, and maybe the last
    this replica sends (an ended stream)."""
    node = FakeNode(CHAIN, "n2")
    rec = next(readings(1, sensors=1, start_ms=100))
    port = node.inputs.ports[0]
    first = node.message("b", STABLE, 0, 100, rec)
    node.step([first], 0.0)
    assert port.last_stable == 0 and node.scheme.path.sunion.boundaries == [None]
    again = FakeMessage(port.topic, first.value(), with_bound(make_headers(STABLE, 0, 100), END), 1)
    node.step([again], 0.0)
    assert node.scheme.path.sunion.boundaries == [END]
    assert len(node.stable("c")) == 1, "the duplicate is not processed twice"


def test_every_record_a_node_writes_names_its_streams_schema() -> None:
    import json

    from fastavro.schema import fingerprint, to_parsing_canonical_form

    from services.core.paths import SCHEMA_DIR
    from services.core.tuples import parse_headers

    node = FakeNode(CHAIN, "n1")
    _feed_n1(node, 4)
    want = fingerprint(to_parsing_canonical_form(json.loads((SCHEMA_DIR / "reading.avsc").read_text())), "CRC-64-AVRO")
    assert {parse_headers(w.headers).schema for w in _records(node, "b")} == {f"reading:{want}"}
