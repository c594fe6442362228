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

from services.core.codec import DecodeError, codec_for, schema_fields
from services.core.config import Settings
from services.core.deadletter import send_to_deadletter
from services.core.kafka import BatchConsumer, BatchProducer, next_tuple_id
from services.core.partitioner import key_encoder
from services.core.spec import Spec
from services.core.tuples import (
    H_EPOCH, H_ID, H_REPLICA, H_STIME, H_TYPE, TYPE_BYTES, HeaderError, TupleType, parse_headers,
)
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
        # Input topic -> (feed function, decoder): downstream replica r reads upstream replica r mod R.
        self.inputs: dict[str, tuple] = {}
        for s in spec.node_inputs(node):
            topic = spec.topic(s, replica % spec.replicas_of_stream(s))
            self.inputs[topic] = (self.pipeline.entry(s), codec_for(spec.streams[s].schema).decode)
        self.outputs = {
            s: (spec.topic(s, replica), codec_for(spec.streams[s].schema).encode, spec.streams[s].key,
                key_encoder(schema_fields(spec.streams[s].schema).get(spec.streams[s].key)))
            for s in spec.node_outputs(node)
        }
        self.next_id: dict[str, int] = {}
        # ht.type, ht.replica, ht.epoch of every output tuple: built once, not per tuple.
        self._fixed_headers = ((H_TYPE, TYPE_BYTES[TupleType.STABLE]), (H_REPLICA, b"%d" % replica), (H_EPOCH, b"0"))
        self.group_id = f"hastream.{spec.name}.{node}.r{replica}.p{partition}"

    def _resume_ids(self) -> None:
        """Continue each output's dense id sequence from the last tuple in its topic."""
        for s, (topic, *_) in self.outputs.items():
            self.next_id[s] = next_tuple_id(self.settings.bootstrap, topic, self.partition)

    def run(self, max_idle_s: float | None = None) -> NodeStats:
        """Process until SIGTERM/SIGINT, or (for tests) ``max_idle_s`` without input once input has started."""
        st = self.settings
        consumer = BatchConsumer(st.bootstrap, self.group_id)
        producer = BatchProducer(st.bootstrap, linger_ms=st.linger_ms)
        consumer.assign(list(self.inputs), self.partition)
        self._resume_ids()
        self.running = True
        self._install_signals()
        idle_since: float | None = None
        offsets: list[TopicPartition] = []
        log.info("node %s p%d r%d reading %s", self.node, self.partition, self.replica, ", ".join(self.inputs))
        try:
            while self.running:
                msgs = consumer.poll_batch(st.batch_size, st.poll_timeout_ms / 1000)
                if not msgs:
                    if max_idle_s is not None and idle_since is not None and time.monotonic() - idle_since > max_idle_s:
                        break
                    continue
                idle_since = time.monotonic()
                self._process(msgs, producer)
                self._produce(producer)
                producer.flush()
                # Asynchronous: the outputs are already acknowledged, and a lost commit only
                # replays this batch, as a crash between flush and commit would.
                offsets = consumer.positions()
                consumer.commit(offsets, asynchronous=True)
        finally:
            producer.flush()
            if offsets:
                consumer.commit(offsets)
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
        """Decode and feed ``msgs``: each run of consecutive messages of one input as one batch."""
        inputs, stats = self.inputs, self.stats
        stable = TYPE_BYTES[TupleType.STABLE]
        run: list = []
        run_topic = None
        feed = decode = None
        for m in msgs:
            topic = m.topic()
            if topic != run_topic:
                if run:
                    feed(run)  # type: ignore[misc]
                    run = []
                run_topic = topic
                feed, decode = inputs[topic]
            h = m.headers()
            try:
                # Fast path: the three headers the loop needs, straight from a dict.
                hd = dict(h)  # type: ignore[arg-type]
                ttype, stime = hd[H_TYPE], int(hd[H_STIME])
                int(hd[H_ID])
                if ttype != stable:
                    parse_headers(h)  # an unknown type is malformed input
                    name = ttype.decode()
                    stats.skipped[name] = stats.skipped.get(name, 0) + 1
                    continue
                run.append((decode(m.value()), stime))
            except (HeaderError, DecodeError, KeyError, TypeError, ValueError) as e:
                send_to_deadletter(producer, self.spec.deadletter_topic, m, _reason(h, e))
                stats.deadlettered += 1
        if run:
            feed(run)  # type: ignore[misc]
        stats.consumed += len(msgs)

    def _produce(self, producer: BatchProducer) -> None:
        part, send = self.partition, producer.send
        produce, on_delivery = producer.raw.produce, producer.on_delivery
        h_type, h_replica, h_epoch = self._fixed_headers
        for s, tuples in self.pipeline.drain().items():
            topic, encode, key_field, key_of = self.outputs[s]
            tid = self.next_id[s]
            for rec, stime in tuples:
                key = key_of(rec[key_field]) if key_field else None
                value = encode(rec)
                headers = [h_type, (H_ID, b"%d" % tid), (H_STIME, b"%d" % stime), h_replica, h_epoch]
                try:
                    produce(topic, value, key, part, headers=headers, on_delivery=on_delivery)
                except BufferError:  # queue full: the wrapper waits for room
                    send(topic, value, key, part, headers)
                tid += 1
            self.stats.produced += tid - self.next_id[s]
            self.next_id[s] = tid


def _reason(headers: list | None, e: Exception) -> str:
    """Why a message was rejected, in the words of the strict parsers."""
    if isinstance(e, (HeaderError, DecodeError)):
        return str(e)
    try:
        parse_headers(headers)
    except HeaderError as he:
        return str(he)
    return f"malformed input: {type(e).__name__}: {e}"
