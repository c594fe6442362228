"""One operator-partition replica: input SUnion, the node's operators, an SOutput per output (Borealis DPC).

Per batch: read the inputs, let SUnion serialize them (stable once boundaries pass,
tentative after the node's delay share when an input is missing or tentative), run the
operators, number the results in SOutput, produce and flush. The state machine is the
paper's:

- STABLE: only stable tuples are processed; a checkpoint is persisted periodically.
- UPSTREAM_FAILURE: SUnion released a tentative bucket. Just before, the node took a
  checkpoint (checkpoint/redo) or set a mark in its operators (undo/redo); results are
  tentative from then on. The node keeps monitoring upstream replicas and switches to a
  stable one when it can.
- STABILIZATION: every tentative input has its stable version; with the coordinator's
  grant (replicas of a node take turns, so one keeps producing current results) the node
  sends UNDO, restores the checkpoint (or undoes), redoes the stable inputs, sends
  REC_DONE and is STABLE again.

Malformed input goes to the dead-letter topic and the service keeps running.
"""
from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from services.core.codec import DecodeError, codec_for, schema_fields
from services.core.config import Settings
from services.core.control import (
    CONTROL, COORDINATOR, HeartbeatSender, NodeState, ReplicaMonitor, control_message, now_ms,
)
from services.core.deadletter import send_to_deadletter
from services.core.kafka import RDKAFKA_LOG, BatchConsumer, BatchProducer
from services.core.partitioner import key_encoder
from services.core.replicas import last_stable_id, offset_after_stable
from services.core.spec import Spec
from services.core.tuples import (
    H_EPOCH, H_ID, H_REPLICA, H_STIME, H_TYPE, TYPE_BYTES, HeaderError, TupleType, parse_headers,
)
from services.node import checkpoint as ckpt_log
from services.node.pipeline import NodePipeline
from services.node.ports import InputPort, input_ports
from services.operators.soutput import Out, SOutput
from services.operators.sunion import STuple, SUnion

log = logging.getLogger(__name__)

STABLE, TENTATIVE = TupleType.STABLE, TupleType.TENTATIVE
_B = {t: TYPE_BYTES[t] for t in TupleType}


@dataclass
class NodeStats:
    consumed: int = 0
    produced: int = 0
    deadlettered: int = 0
    tentative: int = 0
    undos_received: int = 0
    reconciliations: int = 0
    switches: int = 0
    checkpoints: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


class NodeService:
    """Replica ``replica`` of partition ``partition`` of node ``node``."""

    def __init__(self, spec: Spec, node: str, partition: int, replica: int, settings: Settings) -> None:
        if node not in spec.nodes:
            raise ValueError(f"no node '{node}' in spec (nodes: {', '.join(spec.nodes)})")
        self.spec, self.node, self.partition, self.replica = spec, node, partition, replica
        self.settings = settings
        self.dpc = spec.dpc
        self.method = spec.reconciliation_of(node)
        self.pipeline = NodePipeline(spec, node, undo=self.method == "undo")
        self.running = False
        self.stats = NodeStats()
        self.ports = input_ports(spec, node, replica)
        self.port_of_topic = {p.topic: p for p in self.ports}
        self.entries = [self.pipeline.entry(p.stream) for p in self.ports]
        self.decoders = [codec_for(spec.streams[p.stream].schema).decode for p in self.ports]
        self.sunion = SUnion(len(self.ports), self.dpc.bucket, spec.node_delay_s(node), self.dpc.failure_policy)
        self.outputs = {
            s: (spec.topic(s, replica), codec_for(spec.streams[s].schema).encode, spec.streams[s].key,
                key_encoder(schema_fields(spec.streams[s].schema).get(spec.streams[s].key)))
            for s in spec.node_outputs(node)
        }
        self.soutputs = {s: SOutput() for s in self.outputs}
        self.outq: dict[str, list[Out]] = {s: [] for s in self.outputs}
        self.state = NodeState.STABLE
        self.failed = False  # processed tentative input since the last reconciliation
        self.saved: bytes | None = None  # checkpoint/redo: operator state before the failure
        self.requested_at = 0.0
        self.requested_ms = 0  # wall clock of this round's first REQUEST: older GRANTs are stale
        self.granted = False
        self.advanced: int | None = None
        self.ckpt_topic = spec.checkpoint_topic(node, replica)
        self.group_id = f"hastream.{spec.name}.{node}.r{replica}.p{partition}"
        self.epoch = 0

    # -- lifecycle --------------------------------------------------------------
    def run(self, max_idle_s: float | None = None) -> NodeStats:
        """Process until SIGTERM/SIGINT, or (for tests) ``max_idle_s`` without input once input has started."""
        st, dpc = self.settings, self.dpc
        self.consumer = BatchConsumer(st.bootstrap, self.group_id)
        self.producer = BatchProducer(st.bootstrap, linger_ms=st.linger_ms, **{"message.max.bytes": ckpt_log.MAX_CHECKPOINT_BYTES})
        self.monitor = ReplicaMonitor(st.bootstrap, self.spec.heartbeat_topic, dpc.failure_timeout / 1000)
        self.heartbeat = HeartbeatSender(st.bootstrap, self.spec.heartbeat_topic, self.node, self.partition,
                                         self.replica, dpc.heartbeat_interval / 1000).start()
        self.control = Consumer({"bootstrap.servers": st.bootstrap, "group.id": self.group_id + ".control",
                                 "enable.auto.commit": False, "logger": RDKAFKA_LOG})
        self.control.assign([TopicPartition(self.spec.control_topic, 0, OFFSET_END)])
        self._restore()
        self.running = True
        self._install_signals()
        idle_since: float | None = None
        started = False
        next_check = next_ckpt = time.monotonic()
        log.info("node %s p%d r%d (%s) reading %s", self.node, self.partition, self.replica, self.method,
                 ", ".join(p.topic for p in self.ports))
        try:
            while self.running:
                msgs = self.consumer.poll_batch(st.batch_size, st.poll_timeout_ms / 1000)
                now = time.monotonic()
                if msgs:
                    started, idle_since = True, now
                    self._ingest(msgs, now)
                elif max_idle_s is not None and started and idle_since is not None and now - idle_since > max_idle_s:
                    break
                self._step(now)
                if now >= next_check:
                    next_check = now + 0.1
                    self._check_ports()
                    self._check_reconciliation(now)
                if not msgs and not self.failed:
                    for s, so in self.soutputs.items():
                        so.rec_done(self.outq[s])  # caught up after a restart
                self._produce()
                if not self.failed and now >= next_ckpt and not any(so.deduplicating for so in self.soutputs.values()):
                    next_ckpt = now + dpc.checkpoint_interval / 1000
                    self._persist()
        finally:
            self._shutdown()
        return self.stats

    def _shutdown(self) -> None:
        try:
            self._produce()
            if not self.failed:
                self._persist()
            self.producer.flush()
        finally:
            self.heartbeat.stop()
            self.monitor.close()
            self.control.close()
            self.consumer.close()

    def stop(self, *_: object) -> None:
        self.running = False

    def _install_signals(self) -> None:
        try:
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        except ValueError:  # not the main thread (tests run services in threads)
            pass

    # -- checkpoints and restart ---------------------------------------------------
    def _restore(self) -> None:
        """Continue from the newest persisted checkpoint (or from scratch), then resume each output."""
        bs = self.settings.bootstrap
        ck = ckpt_log.load(bs, self.ckpt_topic, self.partition)
        offsets: dict[str, int] = {}
        if ck is not None:
            self.pipeline.restore(ck.pipeline)
            self.sunion = ck.sunion
            self.sunion.delay_s = self.spec.node_delay_s(self.node)
            for s, (next_id, boundary) in ck.outputs.items():
                if s in self.soutputs:
                    self.soutputs[s] = SOutput(next_id, boundary)
            for p in self.ports:
                if p.stream in ck.ports:
                    p.replica, p.last_stable = ck.ports[p.stream]
            offsets = ck.offsets
            log.info("node %s p%d r%d restarting from checkpoint of %d", self.node, self.partition, self.replica, ck.taken_ms)
        self.port_of_topic = {p.topic: p for p in self.ports}
        self.consumer.assign_offsets([
            TopicPartition(p.topic, self.partition, offsets.get(p.topic, OFFSET_BEGINNING)) for p in self.ports
        ])
        for s, (topic, *_) in self.outputs.items():
            last = last_stable_id(bs, topic, self.partition)
            if last is not None:  # the topic has output of an earlier run
                self.outq[s].extend(self.soutputs[s].restarted(last))
        self._produce()

    def _persist(self) -> None:
        """Write a checkpoint: state consistent with the input positions, outputs already flushed."""
        self.producer.flush()
        offsets = {tp.topic: tp.offset for tp in self.consumer.positions()}
        self.sunion.rejected.clear()
        ck = ckpt_log.Checkpoint(
            self.pipeline.snapshot(), self.sunion, {s: so.state() for s, so in self.soutputs.items()},
            {p.stream: (p.replica, p.last_stable) for p in self.ports}, offsets, now_ms(),
        )
        ckpt_log.save(self.producer, self.ckpt_topic, self.partition, ck)
        self.producer.flush()
        self.stats.checkpoints += 1

    # -- input ------------------------------------------------------------------------
    def _ingest(self, msgs: list, now: float) -> None:
        """Hand each message to SUnion by type; malformed ones go to the dead-letter topic."""
        su, port_of, stats, decoders = self.sunion, self.port_of_topic, self.stats, self.decoders
        b_stable, b_tent, b_bound, b_undo, b_done = (_B[STABLE], _B[TENTATIVE], _B[TupleType.BOUNDARY],
                                                     _B[TupleType.UNDO], _B[TupleType.REC_DONE])
        bounds = su.boundaries
        for m in msgs:
            port = port_of.get(m.topic())
            if port is None:
                continue  # in flight from a replica the port just left
            h = m.headers()
            try:
                hd = dict(h)  # type: ignore[arg-type]
                t, tid, stime = hd[H_TYPE], int(hd[H_ID]), int(hd[H_STIME])
                i = port.index
                if t == b_stable or t == b_tent:
                    if t == b_stable and tid <= port.last_stable:
                        continue  # a duplicate after a restart or a switch
                    if bounds[i] is not None and stime < bounds[i]:  # type: ignore[operator]
                        raise ValueError(f"stime {stime} is below the input's boundary {bounds[i]}")
                    rec = decoders[i](m.value())
                    if t == b_stable:
                        su.push(i, STABLE, tid, stime, rec, now)
                        port.last_stable = tid
                    else:
                        su.push(i, TENTATIVE, tid, stime, rec, now)
                elif t == b_bound:
                    su.boundary(i, stime, now)
                elif t == b_undo:
                    su.undo(i)
                    stats.undos_received += 1
                elif t == b_done:
                    stats.skipped["REC_DONE"] = stats.skipped.get("REC_DONE", 0) + 1
                else:
                    parse_headers(h)  # raises: unknown type
            except (HeaderError, DecodeError, KeyError, TypeError, ValueError) as e:
                send_to_deadletter(self.producer, self.spec.deadletter_topic, m, _reason(h, e))
                stats.deadlettered += 1
        stats.consumed += len(msgs)

    def _check_ports(self) -> None:
        """Switch an input to a better upstream replica (stable over tentative, alive over failed)."""
        for p in self.ports:
            r = p.better_replica(self.monitor, self.partition)
            if r is None:
                continue
            old = p.topic
            off = offset_after_stable(self.settings.bootstrap, p.topics[r], self.partition, p.last_stable)
            self.consumer.raw.incremental_unassign([TopicPartition(old, self.partition)])
            p.replica = r
            self.consumer.raw.incremental_assign([TopicPartition(p.topic, self.partition, off)])
            self.port_of_topic = {q.topic: q for q in self.ports}
            self.sunion.undo(p.index)  # the new replica sends its own version of what followed
            p.switches += 1
            self.stats.switches += 1
            log.info("node %s p%d r%d: input %s now reads %s from offset %d", self.node, self.partition,
                     self.replica, p.stream, p.topic, off)

    # -- processing ---------------------------------------------------------------------
    def _step(self, now: float) -> None:
        out = self.sunion.poll(now)
        if out:
            self._run(out)
        self._advance()

    def _run(self, tuples: list[STuple]) -> None:
        """Push SUnion's output through the operators, run by run of one input and one label."""
        i, n, entries = 0, len(tuples), self.entries
        while i < n:
            first = tuples[i]
            label, port = first.type, first.port
            j = i
            items = []
            while j < n and tuples[j].type is label and tuples[j].port == port:
                t = tuples[j]
                items.append((t.rec, t.stime))
                j += 1
            if label is TENTATIVE and not self.failed:
                self._enter_failure()
            entries[port](items)
            self._collect(label)
            i = j

    def _advance(self) -> None:
        """Move operator time to SUnion's stable frontier and tell downstream with a BOUNDARY."""
        f = self.sunion.frontier()
        if f is None or self.failed or (self.advanced is not None and f <= self.advanced):
            return
        self.advanced = f
        self.pipeline.advance(f)
        self._collect(STABLE)
        for s, so in self.soutputs.items():
            so.boundary(f, self.outq[s])

    def _collect(self, label: TupleType) -> None:
        for s, items in self.pipeline.drain().items():
            so = self.soutputs[s]
            if label is STABLE:
                so.stable(items, self.outq[s])
            else:
                so.tentative(items, self.outq[s])
                self.stats.tentative += len(items)

    def _enter_failure(self) -> None:
        """First tentative input: remember the pre-failure state to come back to."""
        if self.method == "checkpoint":
            self.saved = self.pipeline.snapshot()
        else:
            self.pipeline.mark()
        self.failed = True
        self._set_state(NodeState.UPSTREAM_FAILURE)
        log.info("node %s p%d r%d: UPSTREAM_FAILURE", self.node, self.partition, self.replica)

    def _set_state(self, state: NodeState) -> None:
        self.state = state
        self.heartbeat.set_state(state)

    # -- reconciliation -------------------------------------------------------------------
    def _partners(self) -> list[NodeState]:
        n = self.spec.nodes[self.node].replicas
        return [self.monitor.state(self.node, self.partition, r) for r in range(n) if r != self.replica]

    def _check_reconciliation(self, now: float) -> None:
        partners = self._partners()
        # While a partner reconciles, this replica is the one producing current results.
        partner_busy = NodeState.STABILIZATION in partners
        pol = self.dpc.stabilization_policy
        self.sunion.policy = "delay" if partner_busy and pol == "delay" else self.dpc.failure_policy
        if not self.failed or not self.sunion.can_reconcile():
            return
        for m in self.control.consume(100, 0):
            if m.error() is not None:
                continue
            try:
                c = CONTROL.decode(m.value())
            except DecodeError:
                continue
            if (c["kind"] == "GRANT" and self.requested_ms and c["sent_ms"] >= self.requested_ms
                    and (c["node"], c["partition"], c["replica"]) == (self.node, self.partition, self.replica)):
                self.granted = True
        stagger = pol != "suspend"
        if not self.granted and self.monitor.state(COORDINATOR, 0, 0) is NodeState.FAILED:
            # No coordinator: take turns by replica number, never while a partner reconciles.
            lower = partners[: self.replica]
            self.granted = not stagger or (not partner_busy and all(s in (NodeState.STABLE, NodeState.FAILED) for s in lower))
        if self.granted:
            self._reconcile()
        elif now - self.requested_at > 2.0:
            self.requested_at = now
            self.requested_ms = self.requested_ms or now_ms()
            self.producer.send(self.spec.control_topic, control_message("REQUEST", self.node, self.partition, self.replica, stagger))

    def _reconcile(self) -> None:
        """Undo the tentative outputs, restore the pre-failure state, redo the corrected inputs."""
        self._set_state(NodeState.STABILIZATION)
        t0 = time.monotonic()
        for s, so in self.soutputs.items():
            so.undo(self.outq[s])
        if self.method == "checkpoint":
            assert self.saved is not None
            self.pipeline.restore(self.saved)
            self.saved = None
        else:
            self.pipeline.undo()
        self.failed = False
        redo = self.sunion.redo()
        self._run(redo)
        self._advance()
        for s, so in self.soutputs.items():
            so.rec_done(self.outq[s])
        self._produce()
        self.producer.send(self.spec.control_topic, control_message("DONE", self.node, self.partition, self.replica))
        self.granted = False
        self.requested_at, self.requested_ms = 0.0, 0
        self.stats.reconciliations += 1
        self._set_state(NodeState.STABLE)
        log.info("node %s p%d r%d: reconciled %d tuples in %.0f ms", self.node, self.partition, self.replica,
                 len(redo), (time.monotonic() - t0) * 1000)

    # -- output ---------------------------------------------------------------------------
    def _produce(self) -> None:
        part, send = self.partition, self.producer.send
        produce, on_delivery = self.producer.raw.produce, self.producer.on_delivery
        h_replica, h_epoch = (H_REPLICA, b"%d" % self.replica), (H_EPOCH, b"%d" % self.epoch)
        sent = 0
        for s, q in self.outq.items():
            if not q:
                continue
            topic, encode, key_field, key_of = self.outputs[s]
            for ttype, tid, stime, rec in q:
                if rec is not None:
                    key = key_of(rec[key_field]) if key_field else None
                    value = encode(rec)
                else:
                    key = value = None
                headers = [(H_TYPE, _B[ttype]), (H_ID, b"%d" % tid), (H_STIME, b"%d" % stime), h_replica, h_epoch]
                try:
                    produce(topic, value, key, part, headers=headers, on_delivery=on_delivery)
                except BufferError:  # queue full: the wrapper waits for room
                    send(topic, value, key, part, headers)
            sent += len(q)
            q.clear()
        if sent:
            self.stats.produced += sent
            self.producer.flush()


def _reason(headers: list | None, e: Exception) -> str:
    """Why a message was rejected, in the words of the strict parsers."""
    if isinstance(e, (HeaderError, DecodeError)):
        return str(e)
    try:
        parse_headers(headers)
    except HeaderError as he:
        return str(he)
    return f"malformed input: {type(e).__name__}: {e}"
