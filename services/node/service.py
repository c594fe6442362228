"""One operator-partition service: consume the node's inputs, run its operators, produce its outputs.

Per batch: decode, push through the operator chain, encode and produce the outputs,
flush, then commit input offsets, so nothing consumed is lost if the process dies.
Malformed input goes to the dead-letter topic and the service keeps running.
"""
from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from services.core.codec import DecodeError, codec_for
from services.core.config import Settings
from services.core.deadletter import send_to_deadletter
from services.core.kafka import BatchConsumer, BatchProducer, last_message
from services.core.partitioner import key_bytes
from services.core.spec import Spec
from services.core.tuples import HeaderError, TupleType, make_headers, parse_headers
from services.node.pipeline import NodePipeline

log = logging.getLogger(__name__)


@dataclass
class NodeStats:
    consumed: int = 0
    produced: int = 0
    deadlettered: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


class NodeService:
    """Replica ``replica`` of partition ``partition`` of node ``node``."""

    def __init__(self, spec: Spec, node: str, partition: int, replica: int, settings: Settings) -> None:
        if node not in spec.nodes:
            raise ValueError(f"no node '{node}' in spec (nodes: {', '.join(spec.nodes)})")
        self.spec, self.node, self.partition, self.replica = spec, node, partition, replica
        self.settings = settings
        self.pipeline = NodePipeline(spec, node)
        self.running = False
        self.stats = NodeStats()
        # Input topic -> (feed function, codec): downstream replica r reads upstream replica r mod R.
        self.inputs: dict[str, tuple] = {}
        for s in spec.node_inputs(node):
            topic = spec.topic(s, replica % spec.replicas_of_stream(s))
            self.inputs[topic] = (self.pipeline.entry(s), codec_for(spec.streams[s].schema))
        self.outputs = {
            s: (spec.topic(s, replica), codec_for(spec.streams[s].schema), spec.streams[s].key)
            for s in spec.node_outputs(node)
        }
        self.next_id: dict[str, int] = {}
        self.group_id = f"hastream.{spec.name}.{node}.r{replica}.p{partition}"

    def _resume_ids(self) -> None:
        """Continue each output's dense id sequence from the last tuple in its topic."""
        for s, (topic, _, _) in self.outputs.items():
            m = last_message(self.settings.bootstrap, topic, self.partition)
            last = -1
            if m is not None:
                try:
                    last = parse_headers(m.headers()).id
                except HeaderError:
                    last = m.offset()
            self.next_id[s] = last + 1

    def run(self, max_idle_s: float | None = None) -> NodeStats:
        """Process until SIGTERM/SIGINT (or ``max_idle_s`` without input, for tests)."""
        st = self.settings
        consumer = BatchConsumer(st.bootstrap, self.group_id)
        producer = BatchProducer(st.bootstrap, linger_ms=st.linger_ms)
        consumer.assign(list(self.inputs), self.partition)
        self._resume_ids()
        self.running = True
        self._install_signals()
        idle_since = time.monotonic()
        log.info("node %s p%d r%d reading %s", self.node, self.partition, self.replica, ", ".join(self.inputs))
        try:
            while self.running:
                msgs = consumer.poll_batch(st.batch_size, st.poll_timeout_ms / 1000)
                if not msgs:
                    if max_idle_s is not None and time.monotonic() - idle_since > max_idle_s:
                        break
                    continue
                idle_since = time.monotonic()
                self._process(msgs, producer)
                self._produce(producer)
                producer.flush()
                consumer.commit(_next_offsets(msgs))
        finally:
            producer.flush()
            consumer.close()
        return self.stats

    def stop(self, *_: object) -> None:
        self.running = False

    def _install_signals(self) -> None:
        try:
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        except ValueError:  # not the main thread (tests run services in threads)
            pass

    def _process(self, msgs: list, producer: BatchProducer) -> None:
        inputs = self.inputs
        stable = TupleType.STABLE
        for m in msgs:
            feed, codec = inputs[m.topic()]
            try:
                meta = parse_headers(m.headers())
                rec = codec.decode(m.value())
            except (HeaderError, DecodeError) as e:
                send_to_deadletter(producer, self.spec.deadletter_topic, m, str(e))
                self.stats.deadlettered += 1
                continue
            if meta.type is not stable:
                self.stats.skipped[meta.type.value] = self.stats.skipped.get(meta.type.value, 0) + 1
                continue
            feed(rec, meta.stime)
        self.stats.consumed += len(msgs)

    def _produce(self, producer: BatchProducer) -> None:
        part, replica, stable = self.partition, self.replica, TupleType.STABLE
        for s, tuples in self.pipeline.drain().items():
            topic, codec, key_field = self.outputs[s]
            tid = self.next_id[s]
            for rec, stime in tuples:
                key = key_bytes(rec[key_field]) if key_field else None
                producer.send(topic, codec.encode(rec), key, part, make_headers(stable, tid, stime, replica))
                tid += 1
            self.stats.produced += tid - self.next_id[s]
            self.next_id[s] = tid


def _next_offsets(msgs: list) -> list[TopicPartition]:
    """Offsets to commit: one past the last consumed message per topic partition."""
    last: dict[tuple[str, int], int] = {}
    for m in msgs:
        last[(m.topic(), m.partition())] = m.offset()
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]
