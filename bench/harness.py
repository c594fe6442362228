"""Drive a deployment through a fault schedule and record what its outputs looked like.

Fault tests and the experiments share this: node replicas run as real processes
(``ServiceProcesses``, so kill -9 and SIGSTOP are real), sources send a deterministic
workload paced by the wall clock (``bench.workload.PacedSources``, so failures overlap the
stream), and a ``Recorder`` reads every replica topic of the output streams with arrival
times. From the record come the final stable output of each replica, how many tentative
tuples were sent, and how late new results were.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from services.control.monitor import ReplicaMonitor
from services.core.codec import codec_for
from services.core.errors import HeaderError
from services.core.kafka import plain_consumer
from services.core.tuples import TupleType, read_headers
from services.deploy import processes
from services.deploy.local import service_commands, service_env
from services.spec import Spec
from services.spec.exchanges import connection_topic, exchange_of


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServiceProcesses:
    """Every process of a spec (node replicas, and the coordinator unless left out), by role,
    started as children of this process with the commands and environment of a local deployment."""

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
            self.procs[r] = processes.spawn(self.commands[r], self.log_dir / f"{r}.log", self.env)

    def kill(self, role: str) -> None:
        """kill -9: no flush, no commit, no goodbye."""
        processes.kill(self.procs[role], timeout=None)

    def pause(self, role: str) -> None:
        processes.pause(self.procs[role])

    def resume(self, role: str) -> None:
        processes.resume(self.procs[role])

    def alive(self, role: str) -> bool:
        return processes.alive(self.procs[role])

    def stop(self) -> None:
        """SIGTERM every process (a paused one is continued first), kill -9 what is left after 20 s."""
        processes.stop(self.procs.values(), timeout=20, resume_first=True)


@dataclass
class Received:
    """One message of a replica's output as the recorder read it; its payload is decoded when asked
    for, not on arrival: the recorder observes the system and must not take CPU from it then."""

    topic: str
    partition: int
    type: TupleType
    id: int
    stime: int
    payload: bytes | None
    at: float  # monotonic arrival time
    decode: Callable[[bytes], Any] | None = field(default=None, repr=False, compare=False)

    @property
    def value(self) -> dict[str, Any] | None:
        if self.payload is None or self.decode is None:
            return None
        return self.decode(self.payload)


@dataclass
class ReplicaOutput:
    """One replica topic partition's history, and the stream a reader applying UNDO ends with."""

    messages: list[Received] = field(default_factory=list)

    def final_stable(self) -> list[tuple[int, dict[str, Any] | None]]:
        """The stable stream in id order, each id once (duplicates after a restart or switch dropped)."""
        return [(m.id, m.value) for m in self._stable()]

    def stable_count(self) -> int:
        """How long ``final_stable`` is, without decoding it."""
        return len(self._stable())

    def _stable(self) -> list[Received]:
        out: list[Received] = []
        for m in self.messages:
            if m.type is TupleType.STABLE and m.id == len(out):
                out.append(m)
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
    """Reads every replica topic of ``streams`` from the beginning, with arrival times, each within
    about ``wait_s`` of its arrival."""

    def __init__(self, spec: Spec, bootstrap: str, streams: list[str], wait_s: float = 0.1) -> None:
        self.spec, self.wait_s = spec, wait_s
        self.outputs: dict[tuple[str, int], ReplicaOutput] = {}
        self.decode = {t: codec_for(spec.streams[s].schema).decode for s in streams for t in spec.stream_topics(s)}
        self.topic_stream = {t: s for s in streams for t in spec.stream_topics(s)}
        self._c = plain_consumer(bootstrap, "rec", unique=True)
        self._c.assign(
            [
                TopicPartition(t, p, OFFSET_BEGINNING)
                for t in self.decode
                for p in range(spec.topic_partitions(self.topic_stream[t]))
            ]
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(1000, self.wait_s):
                topic, partition = m.topic(), m.partition()
                if m.error() is not None or topic is None or partition is None:
                    continue
                try:
                    t, tid, stime, carried = read_headers(m.headers())
                except HeaderError:
                    continue  # not a tuple: nothing a reader of the stream would see
                at = time.monotonic()
                got = self.outputs.setdefault((topic, partition), ReplicaOutput()).messages
                got.append(Received(topic, partition, t, tid, stime, m.value(), at, self.decode[topic]))
                if carried is not None:  # the boundary that rode on the tuple, as a reader takes it
                    got.append(Received(topic, partition, TupleType.BOUNDARY, tid, carried, None, at))

    def replica(self, stream: str, replica: int, partition: int = 0) -> ReplicaOutput:
        """What replica ``replica`` wrote to ``partition`` of ``stream``; where the stream crosses an
        exchange, ``partition`` numbers its connections: producer partition j to consumer partition i
        is j * consumers + i."""
        ex = exchange_of(self.spec, stream)
        if ex is None:
            return self.outputs.get((self.spec.topic(stream, replica), partition), ReplicaOutput())
        j, i = divmod(partition, ex.consumers)
        return self.outputs.get((connection_topic(self.spec, stream, j, replica), i), ReplicaOutput())

    def wait_for(self, pred: Callable[[], bool], timeout: float) -> bool:
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


def ha_role(mon: ReplicaMonitor, node: str, replica: int, part: int = 0) -> str:
    """The role an HA node replica's live heartbeat reports ("" while it is silent)."""
    st = mon.get(node, part, replica)
    return st.role if st is not None and st.alive(mon.timeout_s) else ""


def wait_primary(
    mon: ReplicaMonitor, node: str, other_than: int | None, timeout: float, replicas: int = 2, part: int = 0
) -> int:
    """The replica of ``node`` (partition ``part``) that is primary, once one other than ``other_than`` says
    so. Polls every 20 ms: a takeover's time is measured by this wait."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in range(replicas):
            if r != other_than and ha_role(mon, node, r, part) == "primary":
                return r
        time.sleep(0.02)
    raise TimeoutError(f"no replica of {node} p{part} other than {other_than} became primary within {timeout:.0f} s")
