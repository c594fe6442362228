"""The node loop calls its recovery scheme at the documented points, in order, on a real broker.

A recording scheme stands in for DPC: the loop must restore it first, hand it every tuple the
node's intake admitted, let it check periodically, flush what it queues on the outputs, and stop it last.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from services.client.source import SourceWriter
from services.client.workload import readings
from services.control.messages import ControlMessage
from services.core.config import Settings
from services.core.tuples import STABLE
from services.node.loop import NodeService
from services.node.merge import Admitted, InputMoved
from services.node.scheme import NodeRuntime
from tests.integration.helpers import create_topics, read_stream, unique_spec

pytestmark = pytest.mark.integration

SPEC = """\
name: slot-{u}
streams:
  in_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: in_{u}, output: out_{u}, where: "True"}
nodes:
  n: {operators: [keep]}
"""


class LogOrder:
    """The merge of one input in its log order (``services.node.merge.Ordering``): what the intake
    admits is kept in ``direct``, in order."""

    def __init__(self) -> None:
        self.direct: list[Any] = []
        self.direct_first = 0
        self.failed = False
        self.boundaries: list[int | None] = [None]
        self.high, self.in_order = -1, True
        self.pending: dict[int, Any] = {}

    @property
    def merge(self) -> LogOrder:
        return self

    def push(
        self, port: int, ttype: Any, tid: int, stime: int, rec: Any, now: float, tmax: int = -1, offset: int = -1
    ) -> None:
        self.direct.append((rec, stime))

    def boundary(self, port: int, stime: int, now: float | None = None) -> None:
        self.boundaries[port] = stime

    def undo(self, port: int, pending: bool = True, kept: bool = True) -> None:
        raise AssertionError("a source stream sends no tentative tuples")


class RecordingScheme:
    """Forwards every admitted data tuple as a stable output with its own id; records each call."""

    overlap_writes = True
    wants_positions = False
    takes_tentative = True

    def __init__(self, node: NodeRuntime) -> None:
        self.node, self.seen = node, 0
        self.calls: list[str] = []
        self.path = LogOrder()

    def on_restart(self) -> dict[str, int]:
        self.calls.append("on_restart")
        return {}

    def before_batch(self, batch: Admitted, now: float) -> None:
        if batch.messages:
            self.calls.append("before_batch")
        items, self.path.direct = self.path.direct, []
        for rec, _ in items:
            stream = self.node.plan.outputs[0].stream
            [(payload, stime)] = self.node.outputs.encode(stream, [(rec, rec["ts"])], self._reject)
            self.node.outputs.queue(stream).append((STABLE, self.seen, stime, payload))
            self.seen += 1

    def _reject(self, where: str, item: Any, reason: str) -> None:
        raise AssertionError(reason)

    def after_batch(self, now: float, idle: bool) -> None:
        if not idle:
            self.calls.append("after_batch")

    def on_input_move(self, moved: InputMoved, now: float) -> None:
        self.calls.append("on_input_move")

    def on_control(self, msg: ControlMessage, now: float) -> None:
        self.calls.append("on_control")

    def on_check(self, now: float) -> None:
        if self.calls[-1] != "on_check":
            self.calls.append("on_check")

    def on_stop(self) -> None:
        self.calls.append("on_stop")

    def progress(self) -> tuple[int, int]:
        return self.seen, -1


def test_loop_calls_the_scheme_at_its_fixed_points(kafka: Any, tmp_path: Path) -> None:
    spec, _ = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    (src,) = spec.sources()
    w = SourceWriter(spec, src, kafka.bootstrap)
    for rec in readings(50, sensors=3):
        w.send(rec)
    w.flush()
    svc = NodeService(spec, "n", 0, 0, Settings(bootstrap=kafka.bootstrap), RecordingScheme)
    scheme = svc.scheme
    assert isinstance(scheme, RecordingScheme)
    t = threading.Thread(target=svc.run, kwargs={"max_idle_s": 2.0}, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive()
    calls = scheme.calls
    assert calls[0] == "on_restart" and calls[-1] == "on_stop"
    batches = [i for i, c in enumerate(calls) if c == "before_batch"]
    assert batches and all(calls[i + 1] == "after_batch" for i in batches), "each batch is taken in, then processed"
    assert "on_check" in calls[batches[-1] :], "periodic checks go on while the node runs"
    assert "on_input_move" not in calls, "a source stream has one topic: its port never moves"
    assert scheme.seen == 50
    out = read_stream(spec, spec.sinks()[0], kafka.bootstrap, expect=50)
    assert [t.meta.id for t in out] == list(range(50)), "what the scheme queued was written, in order"
