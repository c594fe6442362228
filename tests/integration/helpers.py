"""What the integration tests share: unique specs on the shared broker, running nodes, reading outputs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from bench.harness import ha_role, wait_primary  # noqa: F401 - shared with the HA tests
from infra.kafka.cluster import KafkaCluster
from services.client.reader import StreamReader
from services.client.source import END_OF_TIME
from services.coordinator.client import fetch_status, status_url, wait_ready
from services.core.admin import ensure_topics
from services.core.codec import codec_for
from services.core.config import Settings
from services.core.kafka import BatchProducer, plain_consumer
from services.core.login import Login
from services.core.paths import REPO_ROOT
from services.core.tuples import BOUNDARY, STABLE, TupleType, parse_headers
from services.deploy import access
from services.deploy.topics import topic_specs
from services.node.loop import NodeService
from services.node.tasks import PartitionTasks
from services.schemes import build_scheme
from services.spec import Spec, parse_spec

# One filter node from one source: the deployment of the CLI tests ({name} and {u} to fill).
ONE_FILTER = """\
name: {name}-{u}
defaults: {partitions: 1}
streams:
  src_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: src_{u}, output: out_{u}, where: "value >= 0"}
nodes:
  n: {operators: [keep]}
"""


CHAIN = """\
name: chain-{u}
defaults: {partitions: 2}
streams:
  src_{u}: {schema: reading, key: sensor}
  warm_{u}: {schema: reading, key: sensor}
  stats_{u}: {schema: window_stat, key: key}
operators:
  warm: {type: filter, input: src_{u}, output: warm_{u}, where: "value >= 25"}
  win: {type: window, input: warm_{u}, output: stats_{u}, key: sensor, size: 1000,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  first: {operators: [warm]}
  second: {operators: [win]}
"""


def user_env(home: Path) -> dict[str, str]:
    """A user's shell for the hastream command: a HASTREAM_HOME of its own, no HASTREAM_BOOTSTRAP
    (later commands find the broker in the deployment's record) and a wide terminal (no wrapped lines)."""
    env = {**os.environ, "HASTREAM_HOME": str(home), "COLUMNS": "250"}
    env.pop("HASTREAM_BOOTSTRAP", None)
    return env


def one_error_line(r: subprocess.CompletedProcess[str], says: str = "") -> str:
    """The one line a failed command printed (exit code 2, ``error: ...``, no traceback), which says ``says``."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines[0]


def wait_for(
    pred: Callable[[], Any],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
    tolerate: tuple[type[Exception], ...] = (),
) -> Any:
    """``pred()``'s first true value within ``timeout`` s; the errors in ``tolerate`` count as not yet."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except tolerate as e:
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}" + (f" ({last})" if last else ""))


def hastream(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run the hastream command as a user does, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def unique_spec(template: str, tmp_path: Path) -> tuple[Spec, Path]:
    """Instantiate a spec template with a unique ``{u}`` suffix so topics never collide across tests."""
    text = template.replace("{u}", uuid.uuid4().hex[:8])
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return parse_spec(text, str(path), path), path


def create_topics(spec: Spec, bootstrap: str) -> None:
    """Every topic of the spec, configured as a deployment configures it (restart topics compacted)."""
    ensure_topics(bootstrap, topic_specs(spec))


def run_nodes_until_idle(spec: Spec, bootstrap: str, idle_s: float = 3.0) -> dict[str, NodeService]:
    """Run every partition of every node (in dataflow order, each in a thread) until input dries up."""
    services: dict[str, NodeService] = {}
    settings = Settings(bootstrap=bootstrap, batch_size=200)
    for n in spec.topo_nodes():
        threads = []
        if spec.node_processes(n) < spec.node_partitions(n):  # several partition tasks per process
            for q in range(spec.node_processes(n)):
                host = PartitionTasks(spec, n, q, 0, settings, build_scheme)
                services.update({f"{n}.p{t.partition}": t for t in host.tasks})
                threads.append(threading.Thread(target=host.run, kwargs={"max_idle_s": idle_s}, daemon=True))
                threads[-1].start()
        for p in range(spec.node_partitions(n)) if not threads else ():
            svc = services[f"{n}.p{p}"] = NodeService(spec, n, p, 0, settings, build_scheme)
            t = threading.Thread(target=svc.run, kwargs={"max_idle_s": idle_s}, daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(timeout=120)
    return services


def read_stream(spec: Spec, stream: str, bootstrap: str, expect: int | None = None, timeout: float = 30) -> list:
    """The data tuples of a stream's replica-0 topic (control tuples left out): ``expect`` of them,
    or whatever is there once it goes quiet."""
    r = StreamReader(spec, stream, bootstrap)
    data = (TupleType.STABLE, TupleType.TENTATIVE)
    try:
        if expect is not None:
            got = r.read_until(lambda got: sum(t.meta.type in data for t in got) >= expect, timeout)
        else:
            got = list(r.follow(idle_timeout=3))
        return [t for t in got if t.meta.type in data]
    finally:
        r.close()


def by_partition(tuples: list, partitions: int) -> list[list]:
    out: list[list] = [[] for _ in range(partitions)]
    for t in sorted(tuples, key=lambda t: (t.partition, t.offset)):
        out[t.partition].append(t)
    return out


def read_until_end(
    bootstrap: str, topic: str, partitions: int, schema: str, timeout: float = 90
) -> list[dict[int, dict]]:
    """Each partition's stable tuples by id, read until the final boundary has come through (a
    replica that restarted may write an id again: the same tuple)."""
    decode = codec_for(schema).decode
    c = plain_consumer(bootstrap, "check")
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[dict[int, dict]] = [{} for _ in range(partitions)]
    ended: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(ended) < partitions and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is not None:
                    continue
                meta = parse_headers(m.headers())
                p = m.partition() or 0
                if meta.type is STABLE:
                    out[p][meta.id] = decode(m.value())
                bound = meta.stime if meta.type is BOUNDARY else meta.bound  # on its own, or riding on a result
                if bound is not None and bound >= END_OF_TIME - 1000:  # the end, down to a bucket
                    ended.add(p)
    finally:
        c.close()
    assert len(ended) == partitions, f"{topic}: the final boundary did not come through in {timeout}s"
    return out


def write(bootstrap: str, login: Login, topic: str, n: int = 3) -> None:
    """Write ``n`` messages to partition 0 of ``topic`` as ``login``; raises what the broker refused."""
    with access.acting_as(login):
        p = BatchProducer(bootstrap, linger_ms=0)
    for i in range(n):
        p.send(topic, f"v{i}".encode(), b"k", 0)
    p.flush(20)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CoordinatorProcess:
    """``hastream coordinator SPEC`` as a subprocess, killable with SIGKILL and restartable."""

    def __init__(self, spec_path: Path, bootstrap: str, tmp: Path) -> None:
        self.spec_path = spec_path
        self.port = free_port()
        self.url = status_url(self.port)
        self.argv = [
            sys.executable,
            "-m",
            "services.cli.main",
            "coordinator",
            str(spec_path),
            "--port",
            str(self.port),
            "--data-dir",
            str(tmp / "coordinator"),
        ]
        self.env = {
            **os.environ,
            "HASTREAM_BOOTSTRAP": bootstrap,
            "HASTREAM_HOME": str(tmp / "home"),
            "PYTHONPATH": str(REPO_ROOT),
        }
        self.log = tmp / "coordinator.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> dict[str, Any]:
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            return wait_ready(self.url, timeout=40)
        except TimeoutError:
            raise AssertionError(f"coordinator not ready; log:\n{self.log.read_text()[-4000:]}") from None

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def status(self) -> dict[str, Any]:
        return fetch_status(self.url)


def three_brokers(
    tmp_path_factory: pytest.TempPathFactory, name: str, failover: dict[str, int] | None = None
) -> Iterator[KafkaCluster]:
    """A fresh 3-broker cluster (3-voter quorum, RF 3, min ISR 2) in a folder of its own, ``failover``
    changing ``FAILOVER_PROPS``; stopped once the caller's fixture is done with it."""
    with KafkaCluster(brokers=3, data_dir=tmp_path_factory.mktemp(name), failover=failover) as cluster:
        yield cluster
