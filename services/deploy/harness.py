"""Drive a deployment through a fault schedule and record what its outputs looked like.

Fault tests and the experiments share this: node replicas run as real processes (so
kill -9 and SIGSTOP are real), sources send a deterministic workload paced by the wall
clock (so failures overlap the stream), and a recorder reads every replica topic of the
output streams with arrival times. From the record come the final stable output of each
replica, how many tentative tuples were sent, and how late new results were.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from services.client.source import SourceWriter
from services.core.codec import codec_for
from services.core.kafka import RDKAFKA_LOG
from services.core.paths import REPO_ROOT
from services.core.tuples import TYPE_BYTES, TupleType
from services.deploy.local import service_commands, service_env
from services.spec import Spec

END_OF_TIME = 2**62  # the final boundary: no tuple will ever come again


class Services:
    """Every process of a spec (node replicas, and the coordinator if it has a command), by role."""

    def __init__(self, spec: Spec, spec_path: Path, bootstrap: str, log_dir: Path, coordinator: bool = True) -> None:
        self.spec, self.bootstrap, self.log_dir = spec, bootstrap, log_dir
        self.commands = dict(service_commands(spec, spec_path))
        if not coordinator:
            self.commands.pop("coordinator", None)
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = service_env(bootstrap)
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, role: str | None = None) -> None:
        for r in [role] if role else list(self.commands):
            with open(self.log_dir / f"{r}.log", "ab") as f:
                self.procs[r] = subprocess.Popen(
                    self.commands[r],
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=REPO_ROOT,
                    start_new_session=True,
                    stdin=subprocess.DEVNULL,
                )

    def signal(self, role: str, sig: int) -> None:
        os.kill(self.procs[role].pid, sig)

    def kill(self, role: str) -> None:
        """kill -9: no flush, no commit, no goodbye."""
        self.signal(role, signal.SIGKILL)
        self.procs[role].wait()

    def pause(self, role: str) -> None:
        self.signal(role, signal.SIGSTOP)

    def resume(self, role: str) -> None:
        self.signal(role, signal.SIGCONT)

    def alive(self, role: str) -> bool:
        return self.procs[role].poll() is None

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.terminate()
                except ProcessLookupError:
                    pass
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class PacedSources:
    """Sends ``workload[stream]`` records at ``rate`` per second per stream from a thread.

    Record k of every stream carries event time ``base + k * 1000 / rate``, so the streams
    advance together; a BOUNDARY follows every batch. ``hold(stream, seconds)`` models a
    disconnected input: its tuples are generated on time but delivered when it heals.
    """

    def __init__(self, spec: Spec, bootstrap: str, workload: dict[str, list[dict[str, Any]]], rate: float) -> None:
        self.spec, self.workload, self.rate = spec, workload, rate
        self.writers = {s: SourceWriter(spec, s, bootstrap) for s in workload}
        self.held_until: dict[str, float] = {}
        self.sent_at: dict[int, float] = {}  # event time -> wall time it was generated
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PacedSources:
        self._thread.start()
        return self

    def hold(self, stream: str, seconds: float) -> None:
        self.writers[stream].hold()
        self.held_until[stream] = time.monotonic() + seconds

    def _run(self) -> None:
        n = max(len(v) for v in self.workload.values())
        t0 = time.monotonic()
        k = 0
        while k < n:
            now = time.monotonic()
            due = min(n, int((now - t0) * self.rate) + 1)
            for s, w in self.writers.items():
                until = self.held_until.get(s)
                if until is not None and now >= until:
                    del self.held_until[s]
                    w.release()
                recs = self.workload[s][k:due]
                for rec in recs:
                    w.send(rec)
                    self.sent_at.setdefault(rec["ts"], now)
                if recs:
                    w.boundary(recs[-1]["ts"] + 1)
                if s not in self.held_until:
                    w.flush()
            k = due
            time.sleep(max(0.0, t0 + k / self.rate - time.monotonic()))
        while self.held_until:
            time.sleep(0.05)
            for s in list(self.held_until):
                if time.monotonic() >= self.held_until[s]:
                    del self.held_until[s]
                    self.writers[s].release()
        for w in self.writers.values():
            w.boundary(END_OF_TIME)
            w.flush()
        self.done.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


@dataclass
class Received:
    topic: str
    partition: int
    type: TupleType
    id: int
    stime: int
    value: dict[str, Any] | None
    at: float  # monotonic arrival time


@dataclass
class ReplicaOutput:
    """One replica topic partition's history, and the stream a reader applying UNDO ends with."""

    messages: list[Received] = field(default_factory=list)

    def final_stable(self) -> list[tuple[int, dict]]:
        out: list[tuple[int, dict]] = []
        for m in self.messages:
            if m.type is TupleType.STABLE and m.id == len(out):
                out.append((m.id, m.value))  # type: ignore[arg-type]
        return out

    def undid_stable(self) -> list[str]:
        """Violations of "stable tuples are never undone": an UNDO naming an id below the last stable one."""
        last, bad = -1, []
        for m in self.messages:
            if m.type is TupleType.STABLE:
                last = max(last, m.id)
            elif m.type is TupleType.UNDO and m.id < last:
                bad.append(f"{m.topic}[{m.partition}]: UNDO({m.id}) after stable tuple {last}")
        return bad

    def count(self, t: TupleType) -> int:
        return sum(1 for m in self.messages if m.type is t)


class Recorder:
    """Reads every replica topic of ``streams`` from the beginning, with arrival times."""

    def __init__(self, spec: Spec, bootstrap: str, streams: list[str]) -> None:
        self.spec = spec
        self.outputs: dict[tuple[str, int], ReplicaOutput] = {}
        self.decode = {t: codec_for(spec.streams[s].schema).decode for s in streams for t in spec.stream_topics(s)}
        self.topic_stream = {t: s for s in streams for t in spec.stream_topics(s)}
        self._c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"hastream.rec.{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "logger": RDKAFKA_LOG,
            }
        )
        self._c.assign(
            [
                TopicPartition(t, p, OFFSET_BEGINNING)
                for t in self.decode
                for p in range(spec.streams[self.topic_stream[t]].partitions)
            ]
        )
        self._types = {TYPE_BYTES[t]: t for t in TupleType}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(1000, 0.1):
                if m.error() is not None:
                    continue
                h = dict(m.headers() or ())
                t = self._types[h["ht.type"]]
                v = self.decode[m.topic()](m.value()) if m.value() is not None else None
                r = Received(m.topic(), m.partition(), t, int(h["ht.id"]), int(h["ht.stime"]), v, time.monotonic())
                self.outputs.setdefault((m.topic(), m.partition()), ReplicaOutput()).messages.append(r)

    def replica(self, stream: str, replica: int, partition: int = 0) -> ReplicaOutput:
        return self.outputs.get((self.spec.topic(stream, replica), partition), ReplicaOutput())

    def wait_for(self, pred, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.2)
        return pred()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._c.close()
