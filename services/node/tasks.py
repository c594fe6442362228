"""Several partitions of one node replica in one process (a node's ``processes:``), as Kafka
Streams' StreamThread runs many StreamTasks.

Each partition is a task of its own: a ``NodeService`` with its consumers, producer, heartbeats,
restart images, epoch and fence, so failure detection, fencing and recovery stay per partition
(the coordinator and downstream readers see partitions, not processes). The tasks share what is
the process's: one replica monitor (one reader of the heartbeat topic where each task had its
own), one metrics endpoint, and the garbage collector's tuning. Each keeps its own producer: a
flush waits for every message of its producer, and a task's flush (what its restart image says is
written) must not wait on another task's writes. Each task runs its loop in a
thread of its own. A task that fails stops the process: the others stop cleanly (they persist
what a restart needs), the process exits with the error, and the supervisor (or compose's
``restart: on-failure``) starts it again, each task from its own restart point.

Process q of Q hosts the partitions p with p mod Q = q, so the partitions spread evenly and a
process's set never changes while the spec does not.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Callable

from services.control.monitor import ReplicaMonitor
from services.core.config import Settings
from services.core.metrics import Merged, serve_from_env
from services.node.loop import NodeService, tune_gc
from services.node.scheme import NodeRuntime, NodeStats, RecoveryScheme
from services.spec import Spec
from services.spec.plan import plan_node

log = logging.getLogger(__name__)


def tasks_of(process: int, processes: int, partitions: int) -> list[int]:
    """The partitions process ``process`` of ``processes`` hosts."""
    return [p for p in range(partitions) if p % processes == process]


class TaskTag(logging.Filter):
    """Tags each line a task's loop logs with its partition (``task=p<n>``): one process's log holds
    several partitions' lines."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        if record.threadName in self.names:
            record.task = record.threadName
        return True


class PartitionTasks:
    """Replica ``replica`` of the partitions of node ``node`` that process ``process`` hosts."""

    def __init__(
        self,
        spec: Spec,
        node: str,
        process: int,
        replica: int,
        settings: Settings,
        build_scheme: Callable[[NodeRuntime], RecoveryScheme],
    ) -> None:
        plan = plan_node(spec, node)
        self.partitions = tasks_of(process, spec.node_processes(node), plan.partitions)
        self.monitor = ReplicaMonitor(settings.bootstrap, plan.heartbeat_topic, plan.detection_s)
        self.tasks = [
            NodeService(spec, node, p, replica, settings, build_scheme, self.monitor) for p in self.partitions
        ]
        self.errors: list[BaseException] = []

    def run(self, max_idle_s: float | None = None, own_process: bool = False) -> list[NodeStats]:
        """Run every task until SIGTERM/SIGINT (``own_process``), until one fails, or (tests) until each
        has been ``max_idle_s`` without input; re-raises the first task's error."""
        threads = [threading.Thread(target=self._run, args=(t, max_idle_s), name=f"p{t.partition}") for t in self.tasks]
        server = serve_from_env(Merged([t.metrics for t in self.tasks]))
        tag = TaskTag({th.name for th in threads})
        for h in logging.getLogger().handlers:
            h.addFilter(tag)
        if own_process:
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        try:
            for th in threads:
                th.start()
            if own_process:
                self._tune_when_started()
            while any(th.is_alive() for th in threads):
                for th in threads:
                    th.join(0.2)
        finally:
            if server is not None:
                server.close()
            self.monitor.close()
            for h in logging.getLogger().handlers:
                h.removeFilter(tag)
        if self.errors:
            raise self.errors[0]
        return [t.stats for t in self.tasks]

    def stop(self, *_: object) -> None:
        for t in self.tasks:
            t.stop()

    def _run(self, task: NodeService, max_idle_s: float | None) -> None:
        try:
            task.run(max_idle_s)
        except BaseException as e:  # noqa: BLE001 - any task's failure stops the process, whatever it is
            log.error("task %s failed: %s: stopping the process's other tasks", task.name, e)
            self.errors.append(e)
            self.stop()

    def _tune_when_started(self, limit_s: float = 120) -> None:
        """``tune_gc`` once every task built what lives as long as the process (``NodeService.run``)."""
        deadline = time.monotonic() + limit_s
        while not all(t.running for t in self.tasks) and not self.errors and time.monotonic() < deadline:
            time.sleep(0.1)
        tune_gc()
