"""A node's outputs opened with a transactional producer write atomic batches: what is sent between two
flushes (results, control tuples, dead letters) is one transaction, begun before the first record and
committed by the flush (over the fake client of ``tests/unit/core/test_transactions.py``)."""

from __future__ import annotations

import time
from typing import Any

from services.core.tuples import BOUNDARY, STABLE
from services.node.outputs import COMMIT_S, Outputs
from services.spec import parse_spec
from services.spec.plan import plan_node
from tests.unit.core.test_transactions import FakeClient, _producer

TEXT = """\
name: at
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: a, output: b, where: "True"}
nodes:
  n: {operators: [keep]}
"""
SPEC = parse_spec(TEXT)
REC = {"sensor": "s1", "ts": 5, "value": 1.5, "seq": 1}


def _outputs() -> tuple[Outputs, FakeClient]:
    client = FakeClient()
    out = Outputs(plan_node(SPEC, "n").outputs, 0, 0)
    out.open(_producer(client))
    return out, client


def _queue(out: Outputs, n: int) -> None:
    (payload, stime), *_ = out.encode("b", [(REC, 5)], lambda *a: None) * n
    q = out.queue("b")
    q.extend((STABLE, i, stime, payload) for i in range(len(q), len(q) + n))


def test_a_flush_commits_what_was_sent_since_the_last_as_one_transaction() -> None:
    out, client = _outputs()
    _queue(out, 3)
    out.queue("b").append((BOUNDARY, -1, 9, None))
    assert out.flush() == 4 - 1  # the boundary rides on the last result
    assert client.calls == ["begin_transaction", "produce", "produce", "produce", "commit_transaction"]
    client.calls.clear()
    assert out.flush() == 0
    assert client.calls == [], "nothing sent: no transaction"


def test_write_adds_batches_to_the_open_transaction_until_it_is_commit_s_old(monkeypatch: Any) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    out, client = _outputs()
    _queue(out, 2)
    out.write()
    assert client.calls == ["begin_transaction", "produce", "produce"], "sent, not yet committed"
    now[0] += COMMIT_S / 2
    _queue(out, 1)
    out.write()
    assert client.calls[3:] == ["produce"], "a young transaction takes the next batch too"
    now[0] += COMMIT_S
    _queue(out, 1)
    out.write()
    assert client.calls[4:] == ["commit_transaction", "begin_transaction", "produce"], "then it commits first"
    out.flush()
    assert client.calls[7:] == ["commit_transaction"], "a flush always commits"


def test_a_dead_letter_goes_in_the_open_batch() -> None:
    out, client = _outputs()
    out.deadletter_tuple("at.deadletter", "b", (REC, 5), "no Avro form", "n")
    _queue(out, 1)
    out.flush()
    assert client.calls == ["begin_transaction", "produce", "produce", "commit_transaction"]
