"""One operator-partition replica: poll the inputs, let the recovery scheme act, flush the outputs.

Everything a paper defines lives in the scheme (``services.node.scheme``): the loop reads
its plan, builds its Kafka clients, and calls the scheme at fixed points. Malformed input
goes to the dead-letter topic and the service keeps running.
"""

from __future__ import annotations

import gc
import logging
import signal
import time
from contextlib import AbstractContextManager
from typing import Callable

from confluent_kafka import Message

from services.control.channel import ControlReader
from services.control.heartbeat import HeartbeatSender
from services.control.messages import ControlMessage, encode_control
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.core.config import Settings
from services.core.errors import TrimmedError
from services.core.kafka import BatchConsumer, BatchProducer, DataProducer, group_id
from services.core.metrics import MetricsServer, serve_from_env
from services.core.transactions import TransactionalProducer
from services.log import images
from services.node import fence
from services.node.engines import operator_builder
from services.node.intake import Intake
from services.node.metrics import NodeMetrics, reason_label
from services.node.outputs import Outputs
from services.node.pipeline import NodePipeline
from services.node.ports import Inputs
from services.node.scheme import CHECK_INTERVAL_S, NodeRuntime, NodeStats, RecoveryScheme
from services.operators.base import Item
from services.spec import Spec
from services.spec.plan import NodePlan, plan_node
from services.spec.policies import Reconciliation
from services.spec.stores import STORES

log = logging.getLogger(__name__)

GC_YOUNG = 50_000  # container allocations between young collections (Python's default: 700)


def tune_gc() -> None:
    """Collect less on the hot path. A node's tuples die by reference count, so the young
    collections Python runs every 700 allocations (a few per batch) find nothing and cost a scan
    each. What start-up built (clients, plan, codecs, compiled expressions) lives as long as the
    process: frozen, no collection scans it again. Cycles are still collected, just less often."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, older, oldest)


class NodeService:
    """Replica ``replica`` of partition ``partition`` of node ``node``."""

    def __init__(
        self,
        spec: Spec,
        node: str,
        partition: int,
        replica: int,
        settings: Settings,
        build_scheme: Callable[[NodeRuntime], RecoveryScheme],
        monitor: ReplicaMonitor | None = None,
    ) -> None:
        """``build_scheme`` makes the node's recovery scheme (``services.schemes.build_scheme``);
        ``monitor``: the process's, shared by its partition tasks (``services.node.tasks``), which
        then also serve this task's metrics; None: its own, and its own metrics server."""
        self.plan = plan = plan_node(spec, node)
        self.shared_monitor = monitor
        self.partition, self.replica, self.settings = partition, replica, settings
        self.stats = NodeStats()
        self.running = False
        self.epoch = 0  # the epoch this replica writes with (``begin_writing``)
        self.fence: fence.Fence | None = None  # whether a newer writer replaced it (``begin_writing``)
        self.inputs = Inputs(plan.inputs, partition, replica)
        build = operator_builder(plan, replica, partition)
        self.pipeline = NodePipeline(plan, undo=plan.reconciliation is Reconciliation.UNDO, build=build)
        self.outputs = Outputs(plan.outputs, partition, replica)
        self.name = plan.service_name(replica, partition)
        self.scheme: RecoveryScheme = build_scheme(self)
        self.intake = Intake(self, self.scheme.path, self.scheme.wants_positions, self.scheme.takes_tentative)
        self.lags: dict[str, int] = {}  # input stream -> messages not read yet, as of the last check
        self.metrics = NodeMetrics(self)
        self.metrics_server: MetricsServer | None = None

    def run(self, max_idle_s: float | None = None, own_process: bool = False) -> NodeStats:
        """Process until SIGTERM/SIGINT, or (for tests) ``max_idle_s`` without input once input has started.

        ``own_process``: the process runs this node alone, so its garbage collector is tuned for it (``tune_gc``).
        """
        self._connect()
        clean = False
        try:
            self._start()
            if own_process:
                tune_gc()
            self._loop(max_idle_s)
            clean = True
        finally:
            self._close(clean)
        self.stats.produced = self.outputs.produced
        return self.stats

    def _start(self) -> None:
        self.inputs.open(self.consumer, self.scheme.on_restart(), self.fresh_consumer)
        self.outputs.flush()
        self.running = True
        self._install_signals()
        log.info(
            "node %s p%d r%d (%s) reading %s",
            self.plan.node,
            self.partition,
            self.replica,
            self.plan.scheme.value,
            ", ".join(p.topic for p in self.inputs.ports),
        )

    def begin_writing(self, epoch: int | None = None) -> int:
        """Write with ``epoch`` from now on, or with a new one claimed for this replica (None):
        announced on every output first, so readers drop what an earlier writer (a replaced copy
        of this replica, or the primary this one took over from) writes after it
        (``services.node.fence``). Returns the epoch."""
        plan, st = self.plan, self.settings
        if epoch is None:
            epoch = fence.claim_epoch(st.bootstrap, plan.heartbeat_topic, plan.node, self.partition, self.replica)
            time.sleep(fence.NOTICE_S)
        self.epoch = self.heartbeat.epoch = epoch
        f = fence.Fence(
            st.bootstrap,
            self.monitor,
            plan.heartbeat_topic,
            plan.node,
            self.partition,
            self.replica,
            epoch,
            plan.detection_s,
            tuple(range(plan.replicas)) if plan.scheme.one_log else None,
        )
        self.fence = f
        self.outputs.guard = self.images.fence = f.check
        self.images.epoch = epoch
        self.outputs.begin(epoch)
        log.info("epoch %d", epoch)
        return epoch

    def _loop(self, max_idle_s: float | None) -> None:
        scheme, st = self.scheme, self.settings
        last_input: float | None = None
        next_check = time.monotonic()
        while self.running:
            msgs = self._poll()
            now = time.monotonic()
            self.heartbeat.tick(now)
            if msgs:
                last_input = now
            elif max_idle_s is not None and last_input is not None and now - last_input > max_idle_s:
                break
            scheme.before_batch(self.intake.take(msgs, now), now)
            scheme.after_batch(now, idle=not msgs)
            if now >= next_check:
                next_check = now + CHECK_INTERVAL_S
                for port, move in self.inputs.follow_best(self.monitor, st.bootstrap):
                    scheme.on_input_move(self.intake.on_input_move(port, move, now), now)
                for c in self.control.poll():
                    scheme.on_control(c, now)
                scheme.on_check(now)
                self.lags = self.inputs.lags()
                self.heartbeat.report(*scheme.progress(), sum(self.lags.values()))
            self.outputs.end_turn(len(msgs) >= st.batch_size and scheme.overlap_writes)

    def _poll(self) -> list[Message]:
        st = self.settings
        try:
            return self.inputs.poll(st.batch_size, st.poll_timeout_ms / 1000)
        except TrimmedError:
            # A writer replaced while it stood still (SIGSTOP) finds its inputs trimmed to its
            # successor's needs: it says it was replaced (``FencedError``), not that input is lost.
            if self.fence is not None:
                self.fence.check(reread=True)
            raise

    # -- what a scheme may use (``services.node.scheme.NodeRuntime``) -----------------------
    def set_state(self, state: NodeState) -> None:
        self.metrics.state_changed(self.heartbeat.state, state)
        self.heartbeat.set_state(state)

    def set_role(self, role: str, epoch: int) -> None:
        self.heartbeat.role, self.heartbeat.epoch = role, epoch
        self.heartbeat.beat()

    def set_keeps(self, keeps: dict[str, int]) -> None:
        self.heartbeat.keeps = dict(keeps)

    def set_needs(self, needs: dict[str, int]) -> None:
        self.heartbeat.needs = dict(needs)

    def set_standby(self, held: int = 0, checkpoint_ms: int = -1) -> None:
        self.heartbeat.held, self.heartbeat.checkpoint_ms = held, checkpoint_ms

    def tick(self) -> None:
        self.heartbeat.tick()

    def working(self, limit_s: float) -> AbstractContextManager[None]:
        return self.heartbeat.working(limit_s)

    def send_control(self, msg: ControlMessage) -> None:
        self.control_producer.send(self.plan.control_topic, encode_control(msg))

    def deadletter(self, msg: Message, reason: str) -> None:
        self.outputs.deadletter(self.plan.deadletter_topic, msg, reason, self.name)
        self._count_deadletter(reason_label(reason))

    def reject(self, where: str, item: Item, reason: str) -> None:
        self.outputs.deadletter_tuple(self.plan.deadletter_topic, where, item, reason, self.name)
        self._count_deadletter(reason_label(reason, rejected=True))

    def _count_deadletter(self, label: str) -> None:
        by = self.stats.deadlettered_by
        by[label] = by.get(label, 0) + 1

    # -- lifecycle ---------------------------------------------------------------------------
    def _connect(self) -> None:
        st, plan = self.settings, self.plan
        # An HA node reads from recovery positions (checkpoints, acks): a trimmed one must stop it, not skip.
        self.consumer = BatchConsumer(st.bootstrap, group_id(self.name), trims_fail=plan.scheme.one_log)
        # Rule 4 reads a second replica of an input through a consumer of its own (services.node.ports).
        replicated = any(len(p.topics) > 1 for p in plan.inputs)
        self.fresh_consumer = BatchConsumer(st.bootstrap, group_id(self.name) + ".fresh") if replicated else None
        self.producer = _producer(st, plan, self.name)
        # Control messages never wait for a batch's commit: outside the outputs' transactions, if any.
        transactional = isinstance(self.producer, TransactionalProducer)
        self.control_producer = BatchProducer(st.bootstrap, linger_ms=0) if transactional else self.producer
        self.images = images.ImageWriter(
            st.bootstrap, plan.restart_topics[self.replica], self.partition, on_written=self._image_written
        )
        self.outputs.open(self.producer)
        self.monitor = self.shared_monitor or ReplicaMonitor(st.bootstrap, plan.heartbeat_topic, plan.detection_s)
        self.heartbeat = HeartbeatSender(
            st.bootstrap,
            plan.heartbeat_topic,
            plan.node,
            self.partition,
            self.replica,
            plan.heartbeat_s,
            stall_s=plan.detection_s,
            state=NodeState.RECOVERING,
        ).start()
        self.control = ControlReader(st.bootstrap, plan.control_topic, f"{self.name}.control")
        self.metrics_server = serve_from_env(self.metrics) if self.shared_monitor is None else None

    def _close(self, clean: bool) -> None:
        """After a clean stop the scheme persists what a restart needs; after an error nothing is
        persisted, since the state may be half-processed: the restart goes back to the last image."""
        try:
            if clean:
                self.outputs.flush()
                self.scheme.on_stop()
                self.producer.flush()
                self.control_producer.flush()
        finally:
            if self.metrics_server is not None:
                self.metrics_server.close()
            self.heartbeat.stop()
            self.images.close()
            if self.shared_monitor is None:
                self.monitor.close()
            self.control.close()
            self.consumer.close()
            if self.fresh_consumer is not None:
                self.fresh_consumer.close()

    def _image_written(self) -> None:
        self.stats.restart_images += 1
        self.stats.restart_image_bytes = self.images.last_bytes

    def stop(self, *_: object) -> None:
        self.running = False

    def _install_signals(self) -> None:
        try:
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        except ValueError:  # not the main thread (tests run services in threads)
            pass


def _producer(st: Settings, plan: NodePlan, name: str) -> DataProducer:
    """A node whose store writes atomic batches (CEC's output log) writes in transactions under its
    partition replica's own id: taking it over fences every earlier incarnation's producer and aborts
    what that one left open, so a paused copy that wakes up cannot add to the log."""
    if plan.state is None or not STORES[plan.state].atomic:
        return BatchProducer(st.bootstrap, linger_ms=st.linger_ms)
    producer = TransactionalProducer(st.bootstrap, f"{name}.out", linger_ms=st.linger_ms)
    producer.init()
    return producer
