"""What the HA tests on a real broker share: one spec deployed with its coordinator and every node
replica as processes, a heartbeat monitor to see roles, paced input, and the final output beside
the failure-free one."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from bench.workload import PacedSources, readings_workload
from services.client.view import StreamView
from services.control.monitor import ReplicaMonitor
from services.core.partitioner import key_bytes, partition_for
from services.deploy import processes
from services.deploy.local import service_commands, service_env
from services.deploy.topics import provision
from services.ha.guarantee import repeated_runs
from services.log.tail import stable_log
from services.operators.reference import evaluate
from services.spec.exchanges import connection_topic, exchange_of
from tests.integration.helpers import CoordinatorProcess, ha_role, unique_spec, wait_for, wait_primary


class HaRig:
    """``text`` (a spec template with ``{u}``) deployed on ``bootstrap``: the coordinator runs, and
    ``start`` runs a node replica partition, each run with a log of its own (``log``). Input: ``count``
    readings at ``rate`` per second on the stream ``in_{u}`` (and on each of ``more`` inputs), started by
    ``feed``. A node replica is partition 0 of it unless ``part`` says otherwise."""

    def __init__(
        self,
        bootstrap: str,
        tmp_path: Path,
        text: str,
        count: int,
        rate: int,
        sensors: int = 4,
        more: tuple[str, ...] = (),
    ) -> None:
        self.spec, path = unique_spec(text, tmp_path)
        self.u = self.spec.name.split("-")[1]
        self.bootstrap, self.rate = bootstrap, rate
        provision(self.spec, bootstrap)
        self.argv = dict(service_commands(self.spec, path))
        self.env, self.logs = service_env(bootstrap), tmp_path / "logs"
        self.logs.mkdir()
        self.coordinator = CoordinatorProcess(path, bootstrap, tmp_path)
        self.coordinator.start()
        self.procs: dict[tuple[str, int, int], subprocess.Popen] = {}
        self.runs: dict[tuple[str, int, int], int] = {}
        self.mon = ReplicaMonitor(bootstrap, self.spec.heartbeat_topic, 1.0)
        self.input = f"in_{self.u}"
        self.inputs = [self.input] + [f"{m}_{self.u}" for m in more]
        self.workload = readings_workload(self.inputs, count, rate, sensors=sensors)
        self.sources: PacedSources | None = None

    def start(self, node: str, replica: int, part: int = 0) -> None:
        key = (node, replica, part)
        self.runs[key] = self.runs.get(key, 0) + 1
        self.procs[key] = processes.spawn(
            self.argv[f"{node}.r{replica}.p{part}"], self._log_path(node, replica, part, self.runs[key]), self.env
        )

    def _log_path(self, node: str, replica: int, part: int, run: int | str) -> Path:
        return self.logs / f"{node}{replica}{f'p{part}' if part else ''}-{run}.log"

    def proc(self, node: str, replica: int, part: int = 0) -> subprocess.Popen:
        return self.procs[(node, replica, part)]

    def log(self, node: str, replica: int, run: int = 1, part: int = 0) -> str:
        """What run ``run`` of the replica wrote to its log."""
        return self._log_path(node, replica, part, run).read_text()

    def primary(self, node: str, other_than: int | None = None, timeout: float = 20, part: int = 0) -> int:
        """The replica that says it is primary, once one other than ``other_than`` does."""
        return wait_primary(self.mon, node, other_than, timeout, self.spec.nodes[node].replicas, part)

    def rejoined(self, node: str, replica: int, timeout: float = 60) -> None:
        wait_for(lambda: ha_role(self.mon, node, replica) == "secondary", timeout, f"{node} r{replica} to rejoin")

    def settled(self, node: str, timeout: float = 60, part: int = 0) -> None:
        """Until every replica of ``node`` runs, one primary and the rest secondaries. A replica that
        exits meanwhile is started again, as the supervisor of a deployment does (a primary failed
        over for standing still past the detection time exits, and comes back as secondary)."""
        replicas = self.spec.nodes[node].replicas

        def done() -> bool:
            for r in range(replicas):
                if not processes.alive(self.procs[(node, r, part)]):
                    self.start(node, r, part)
            roles = sorted(ha_role(self.mon, node, r, part) for r in range(replicas))
            return roles == ["primary"] + ["secondary"] * (replicas - 1)

        wait_for(done, timeout, f"{node} p{part}'s replicas to settle as one primary and secondaries")

    def takeovers(self, node: str, part: int = 0) -> int:
        """The promotions of ``node``'s replicas (of partition ``part``) after its first primary, from
        every run's log."""
        runs = self.logs.glob(f"{node}[0-9]{f'p{part}' if part else ''}-*.log")
        said = sum(p.read_text().count("primary at epoch") for p in runs)
        return max(0, said - 1)

    def feed(self) -> None:
        self.sources = PacedSources(self.spec, self.bootstrap, self.workload, self.rate).start()

    def outputs(self, stream: str, timeout: float = 90, part: int = 0) -> tuple[list[Any], list[Any]]:
        """Once the input is all sent: the failure-free output of ``stream`` (partition ``part``) and the
        stable output as a client reads it, up to the failure-free run's last tuple and a second more."""
        assert self.sources is not None
        self.sources.join(120)
        want = evaluate(self.spec, {s: self._by_partition(s) for s in self.inputs}, ended=True)[stream][part]
        with StreamView(self.spec, stream, self.bootstrap, stable_only=True) as view:
            view.read_until(lambda v: bool(v.stable(part)) and v.stable(part)[-1] == want[-1], timeout)
            time.sleep(1.0)
            view.poll(timeout=0.5)
            return want, view.stable(part)

    def _by_partition(self, stream: str) -> list[list[Any]]:
        """The input of ``stream`` split as its source writer places it: by key."""
        sd = self.spec.streams[stream]
        out: list[list[Any]] = [[] for _ in range(sd.partitions)]
        for rec in self.workload[stream]:
            out[partition_for(key_bytes(rec[sd.key or "sensor"]), sd.partitions)].append(rec)
        return out

    def stored(self, stream: str, part: int = 0) -> list[tuple[int, Any]]:
        """What the log of ``stream`` (partition ``part``) holds, duplicates included: (id, (stime, value, key))."""
        return self.stored_at(self.spec.topic(stream), part)

    def stored_at(self, topic: str, part: int) -> list[tuple[int, Any]]:
        return [(tid, (stime, kv)) for tid, stime, kv in stable_log(self.bootstrap, topic, part)]

    def output_logs(self, stream: str, part: int = 0) -> list[tuple[str, int]]:
        """(topic, partition) of what partition ``part`` of ``stream``'s writer writes: its log, or where
        the stream crosses an exchange one log per connection (``services.spec.exchanges``)."""
        ex = exchange_of(self.spec, stream)
        if ex is None:
            return [(self.spec.topic(stream), part)]
        return [(connection_topic(self.spec, stream, part, 0), i) for i in range(ex.consumers)]

    def assert_precise(self, stream: str, want: list[Any], got: list[Any]) -> None:
        """Precise recovery: a client reads the failure-free output, and the log holds each tuple once."""
        assert len(got) == len(want) and got == want, f"{stream}: the output differs from the failure-free run"
        stored = self.stored(stream)
        assert repeated_runs(stored) == [] and len(stored) == len(want), f"{stream}: the log holds a tuple twice"

    def assert_repeating(
        self,
        stream: str,
        failures: int,
        run_s: float,
        input_s: float,
        part: int = 0,
        log: tuple[str, int] | None = None,
    ) -> list[range]:
        """Repeating rollback recovery: the log of ``stream`` loses nothing and repeats identical tuples
        in order (``repeated_runs`` raises otherwise), at most one run per failure, each at most
        ``run_s`` of its output (its rate taken over ``input_s`` of input); returns the runs. A log
        upstream backup trimmed is checked from its start. ``log``: one connection's (``output_logs``)."""
        stored = self.stored_at(*log) if log is not None else self.stored(stream, part)
        runs = repeated_runs(stored, stored[0][0] if stored else 0)
        bound = (max((tid for tid, _ in stored), default=-1) + 1) / input_s * run_s
        assert len(runs) <= failures, f"{stream}: the log repeats {runs}: one run per failure at most"
        assert all(len(r) <= bound for r in runs), f"{stream}: the log repeats {runs}, more than {bound:.0f} tuples"
        return runs

    def close(self) -> None:
        self.mon.close()
        processes.stop(list(self.procs.values()), timeout=20, resume_first=True)
        self.coordinator.stop()
