"""A node replica without Kafka, for driving a recovery scheme message by message.

The scheme gets the real plan, pipeline, input ports and outputs (encoding, headers); only
the Kafka clients are fakes: a producer that keeps what it is given per topic, and a
monitor whose replica states the test sets.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, cast

from services.control.messages import ControlMessage
from services.control.states import NodeState
from services.core.codec import codec_for
from services.core.config import Settings
from services.core.tuples import BOUNDARY, STABLE, TENTATIVE, UNDO, TupleType, make_headers, read_headers, with_tmax
from services.dpc.scheme import DpcScheme
from services.node.intake import Intake
from services.node.outputs import Outputs
from services.node.pipeline import NodePipeline
from services.node.ports import Inputs
from services.node.scheme import NodeStats
from services.operators.base import Item
from services.schemes import build_scheme
from services.spec import Spec, parse_spec
from services.spec.model import RAW_SUFFIX
from services.spec.plan import plan_node
from services.spec.policies import Reconciliation

# Two nodes in a chain, two replicas each: n2 reads n1's replicated output.
CHAIN_TEXT = """\
name: chain
defaults: {replicas: 2}
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
  c: {schema: reading, key: sensor}
operators:
  up: {type: filter, input: a, output: b, where: "True"}
  down: {type: filter, input: b, output: c, where: "True"}
nodes:
  n1: {operators: [up]}
  n2: {operators: [down]}
"""
CHAIN = parse_spec(CHAIN_TEXT)


@dataclass
class FakeMessage:
    _topic: str
    _value: bytes | None
    _headers: list
    _offset: int = 0
    _partition: int = 0
    _key: bytes | None = None
    _timestamp: int = 0

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)  # CreateTime

    def topic(self) -> str:
        return self._topic

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list:
        return self._headers

    def key(self) -> bytes | None:
        return self._key

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return self._partition

    def error(self) -> None:
        return None


@dataclass
class Written:
    value: bytes | None
    key: bytes | None
    headers: list


class FakeProducer:
    """Keeps every message per topic; ``fail`` makes the next flush raise, as a delivery error does.

    A flush acknowledges everything sent before it: ``order`` is every message's topic in the
    order sent, ``acked_then`` how many of them were acknowledged when each was sent."""

    def __init__(self) -> None:
        self.topics: dict[str, list[Written]] = defaultdict(list)
        self.fail: str | None = None
        self.order: list[str] = []
        self.acked_then: list[int] = []
        self.acked = 0

    @property
    def raw(self) -> FakeProducer:
        return self

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1, **kw: Any) -> None:
        self.send(topic, value, key, partition, kw.get("headers"))

    def send(self, topic: str, value: Any, key: Any = None, partition: int = -1, headers: Any = None) -> None:
        self.topics[topic].append(Written(value, key, headers or []))
        self.order.append(topic)
        self.acked_then.append(self.acked)

    def on_delivery(self, err: Any, msg: Any) -> None:
        pass

    def flush(self, timeout: float = 30) -> None:
        if self.fail:
            raise RuntimeError(self.fail)
        self.acked = len(self.order)

    def acked_in(self, topic: str, upto: int | None = None) -> int:
        """How many of ``topic``'s messages were acknowledged: now, or when message number ``upto`` was sent."""
        n = self.acked if upto is None else self.acked_then[upto]
        return self.order[:n].count(topic)


class FakeImages:
    """Writes each restart image at once and whole, as one message of the restart topic."""

    busy = False
    failed = 0
    last_bytes = 0

    def __init__(self, producer: FakeProducer, topic: str) -> None:
        self.producer, self.topic = producer, topic
        self.queued = self.written = 0
        self.hold = False  # writes wait (``written`` stays) until ``release``

    def write(self, image: Any, progress: Any = None) -> None:
        self.producer.send(self.topic, pickle.dumps(image))
        self._done()

    def write_delta(self, data: bytes, chain: int, seq: int) -> None:
        self.producer.send(self.topic, data)
        self._done()

    def _done(self) -> None:
        self.queued += 1
        if not self.hold:
            self.written = self.queued

    def release(self) -> None:
        self.hold, self.written = False, self.queued

    def wait(self) -> None:
        pass


class FakeConsumer:
    """Knows the position after the last message the node took from each topic, and each topic's end."""

    def __init__(self, ends: dict[str, int]) -> None:
        self.read: dict[str, int] = {}
        self.ends = ends

    @property
    def raw(self) -> FakeConsumer:
        return self

    def list_topics(self, topic: str, timeout: float = -1) -> None:
        pass

    def get_watermark_offsets(self, tp: Any, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        return 0, self.ends.get(tp.topic, 0)

    def positions(self) -> list:
        from confluent_kafka import TopicPartition

        return [TopicPartition(t, 0, off) for t, off in self.read.items()]

    def incremental_assign(self, tps: list) -> None:
        pass

    def hold(self, on: bool) -> None:
        self.holding = on

    def assign_offsets(self, tps: list) -> None:
        self.assigned = {tp.topic: tp.offset for tp in tps}

    def incremental_unassign(self, tps: list) -> None:
        pass


class FakeMonitor:
    """Replica states (STABLE unless set; the coordinator FAILED) and output boundaries the test sets."""

    timeout_s = 1.0

    def __init__(self, known: dict[tuple[str, int, int], NodeState] | None = None) -> None:
        self.known: dict[tuple[str, int, int], NodeState] = dict(known or {})
        self.bounds: dict[tuple[str, int, int], int] = {}

    def boundaries(self, node: str, partition: int, replicas: int) -> list[int]:
        return [self.bounds.get((node, partition, r), -1) for r in range(replicas)]

    def state(self, node: str, partition: int, replica: int) -> NodeState:
        return self.known.get(
            (node, partition, replica), NodeState.FAILED if node == "coordinator" else NodeState.STABLE
        )

    def states(self, node: str, partition: int, replicas: int) -> list[NodeState]:
        return [self.state(node, partition, r) for r in range(replicas)]


@dataclass
class FakeNode:
    """A node replica (``NodeRuntime``) over fakes, with its DPC scheme."""

    spec: Spec
    node: str
    replica: int = 0
    partition: int = 0
    states: list[NodeState] = field(default_factory=list)
    controls: list[ControlMessage] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.plan = plan_node(self.spec, self.node)
        self.settings = Settings(bootstrap="unused:9092")
        self.stats = NodeStats()
        self.inputs = Inputs(self.plan.inputs, self.partition, self.replica)
        self.pipeline = NodePipeline(self.plan, undo=self.plan.reconciliation is Reconciliation.UNDO)
        self.outputs = Outputs(self.plan.outputs, self.partition, self.replica)
        self.producer = FakeProducer()
        self.outputs.open(self.producer)
        self.images = FakeImages(self.producer, self.plan.restart_topics[self.replica])
        self.monitor = FakeMonitor()
        self.offsets: dict[str, int] = defaultdict(int)  # each input topic's end: messages made so far
        self.consumer = FakeConsumer(self.offsets)
        self.inputs.consumer = self.consumer  # type: ignore[assignment]
        self.log: dict[str, list[FakeMessage]] = defaultdict(list)  # every message made, per topic
        self.replay: list[FakeMessage] = []  # what the ports read again after a rewind
        self.inputs.rewind = self._rewind  # type: ignore[method-assign]
        self.scheme = cast(
            DpcScheme, build_scheme(self)
        )  # DPC's tests use it so; the HA tests check their scheme's class first
        self.intake = Intake(self, self.scheme.path, self.scheme.wants_positions, self.scheme.takes_tentative)
        self.ticks = 0
        self.roles: list[tuple[str, int]] = []
        self.keeps: dict[str, int] = {}  # what its heartbeats would carry (``set_keeps``, ``set_needs``)
        self.needs: dict[str, int] = {}
        self.epochs: list[int] = []

    # -- NodeRuntime -----------------------------------------------------------------
    def set_state(self, state: NodeState) -> None:
        self.states.append(state)

    def set_role(self, role: str, epoch: int) -> None:
        self.roles.append((role, epoch))

    def set_keeps(self, keeps: dict[str, int]) -> None:
        self.keeps = dict(keeps)

    def set_needs(self, needs: dict[str, int]) -> None:
        self.needs = dict(needs)

    def set_standby(self, held: int = 0, checkpoint_ms: int = -1) -> None:
        self.standby = (held, checkpoint_ms)

    def begin_writing(self, epoch: int | None = None) -> int:
        epoch = epoch if epoch is not None else len(self.epochs) + 1
        self.epochs.append(epoch)
        self.outputs.begin(epoch)
        return epoch

    def send_control(self, msg: ControlMessage) -> None:
        self.controls.append(msg)

    def tick(self) -> None:
        self.ticks += 1

    def working(self, limit_s: float) -> AbstractContextManager[None]:
        return nullcontext()

    def deadletter(self, msg: Any, reason: str) -> None:
        self.outputs.deadletter(self.plan.deadletter_topic, msg, reason, "fake")

    def reject(self, where: str, item: Item, reason: str) -> None:
        self.outputs.deadletter_tuple(self.plan.deadletter_topic, where, item, reason, "fake")

    # -- driving it --------------------------------------------------------------------
    def message(
        self,
        stream: str,
        ttype: TupleType,
        tid: int,
        stime: int,
        rec: dict | None = None,
        replica: int | None = None,
        tmax: int | None = None,
    ) -> FakeMessage:
        """One message on the topic the input port of ``stream`` reads now (or on upstream replica
        ``replica``'s topic), a tentative one carrying ``tmax``."""
        port = next(p for p in self.inputs.ports if p.stream == stream)
        topic = port.topic if replica is None else port.topics[replica]
        value = codec_for(self.spec.streams[stream].schema).encode(rec) if rec is not None else None
        off = self.offsets[topic]
        self.offsets[topic] += 1
        headers = make_headers(ttype, tid, stime)
        msg = FakeMessage(topic, value, headers if tmax is None else with_tmax(headers, tmax), off, self.partition)
        self.log[topic].append(msg)
        return msg

    def raw(self, stream: str, value: bytes | None, headers: list | None = None, timestamp: int = 0) -> FakeMessage:
        """One message an outside client wrote to the raw topic of an ingress-fed ``stream``."""
        topic = self.spec.topic(stream + RAW_SUFFIX)
        msg = FakeMessage(topic, value, headers or [], self.offsets[topic], self.partition, None, timestamp)
        self.offsets[topic] += 1
        self.log[topic].append(msg)
        return msg

    def _rewind(self, last_stable: dict[str, int], bootstrap: str) -> None:
        """``Inputs.rewind`` over the fake log: each port reads its topic again right after the
        last STABLE or UNDO naming an id up to its last stable id (``seek_after_stable``)."""
        for p in self.inputs.ports:
            p.last_stable = last_stable[p.stream]
            msgs = self.log[p.topic]
            start = next(
                (
                    i + (h[0] is UNDO or h[1] < p.last_stable or h[3] is None)  # its last tuple again if carrying
                    for i in range(len(msgs) - 1, -1, -1)
                    if (h := read_headers(msgs[i].headers()))[0] in (STABLE, UNDO) and h[1] <= p.last_stable
                ),
                0,
            )
            self.replay += msgs[start:]
            self.consumer.read[p.topic] = start

    def take_replay(self) -> list[FakeMessage]:
        out, self.replay = self.replay, []
        return out

    def step(self, msgs: list[FakeMessage], now: float) -> None:
        """One loop iteration: the polled messages, processing, the periodic checks, flush."""
        for m in msgs:
            self.consumer.read[m.topic()] = m.offset() + 1
        self.scheme.before_batch(self.intake.take(msgs, now), now)  # type: ignore[arg-type]
        self.scheme.after_batch(now, idle=not msgs)
        self.scheme.on_check(now)
        self.outputs.end_turn(len(msgs) >= self.settings.batch_size and self.scheme.overlap_writes)

    def written(self, stream: str) -> list[tuple[TupleType, int, int, dict | None]]:
        """What this replica wrote to ``stream``: (type, id, stime, record), a boundary that rode on a
        tuple as the BOUNDARY after it, as a reader takes it."""
        decode = codec_for(self.spec.streams[stream].schema).decode
        out: list[tuple[TupleType, int, int, dict | None]] = []
        for w in self.producer.topics[self.outputs.topic(stream)]:
            t, tid, stime, carried = read_headers(w.headers)
            out.append((t, tid, stime, decode(w.value) if w.value is not None else None))
            if carried is not None:
                out.append((BOUNDARY, tid, carried, None))
        return out

    def stable(self, stream: str) -> list[tuple[int, dict]]:
        """(id, record) of every stable tuple written to ``stream``, in order."""
        return [(tid, rec) for t, tid, _, rec in self.written(stream) if t is STABLE and rec is not None]

    def stable_in(self, topic: str) -> list[tuple[int, tuple[int, tuple[bytes | None, bytes | None]]]]:
        """What ``stable_after`` reads of a topic this node wrote: (id, (stime, (value, key))) of each stable tuple."""
        out = []
        for w in self.producer.topics[topic]:
            t, tid, stime, _ = read_headers(w.headers)
            if t is STABLE:
                out.append((tid, (stime, (w.value, w.key))))
        return out

    def deadletters(self) -> list[dict[str, bytes]]:
        return [dict(w.headers) for w in self.producer.topics[self.plan.deadletter_topic]]


def source_messages(
    node: FakeNode, stream: str, recs: list[dict], boundary_every: int = 1, time: str = "ts"
) -> list[FakeMessage]:
    """A source's stable tuples with dense ids, stime = ``rec[time]``, a BOUNDARY after every ``boundary_every``."""
    out = []
    for i, r in enumerate(recs):
        out.append(node.message(stream, STABLE, i, r[time], r))
        if (i + 1) % boundary_every == 0:
            out.append(node.message(stream, BOUNDARY, i, r[time] + 1))
    return out


__all__ = [
    "BOUNDARY",
    "CHAIN",
    "STABLE",
    "TENTATIVE",
    "UNDO",
    "FakeMessage",
    "FakeMonitor",
    "FakeNode",
    "source_messages",
]
