"""Kill -9 of a passive standby primary in the middle of writing a checkpoint image (ICDE 2005,
section 5.1; the torn write of ``services.node.restart``).

Three replicas of a window node with a large state (a minute sliding by 5 s over 100,000 sensors: an
image of a few 1 MiB chunks). The first primary is killed; the replica that takes over writes
the first image of its own chain, slowed by a Kafka client quota on the images' writer, and is
stopped and killed as soon as its first chunk reaches the log, before the manifest. The third replica, a warm standby that had followed the first
primary's deltas and ignored the torn image, takes over from them. Passive standby promises
precise recovery here (a deterministic node), so the output must equal the failure-free output
tuple for tuple. The detection time is 1 s: a collection of the garbage collector over a state
of this size may stop the process for a few hundred ms, which the default 300 ms would take for a
failure.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from bench.workload import PacedSources, readings_workload
from infra.kafka.cluster import set_client_quota
from services.client.view import StreamView
from services.control.monitor import ReplicaMonitor
from services.core.kafka import plain_consumer
from services.deploy import processes
from services.deploy.local import provision, service_commands, service_env
from services.log.tail import messages_after
from services.node import restart
from services.operators.reference import evaluate
from tests.integration.helpers import CoordinatorProcess, ha_role, unique_spec, wait_for, wait_primary

pytestmark = pytest.mark.integration

SPEC = """\
name: pscut-{u}
defaults: {partitions: 1}
streams:
  in_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: window_stat, key: key}
operators:
  win: {type: window, input: in_{u}, output: out_{u}, key: sensor, size: 60000, slide: 5000,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win], replicas: 3, ha: {scheme: passive_standby, recovery: precise, interval_ms: 50,
                                         heartbeat_ms: 100, misses: 10}}
"""
RATE, COUNT, SENSORS = 1000, 14_000, 100_000  # input flows on past both kills


def test_a_primary_killed_while_writing_an_image_is_recovered_precisely(kafka: Any, tmp_path: Path) -> None:
    spec, path = unique_spec(SPEC, tmp_path)
    u = spec.name.split("-")[1]
    provision(spec, kafka.bootstrap)
    argv = dict(service_commands(spec, path))
    env, logs = service_env(kafka.bootstrap), tmp_path / "logs"
    logs.mkdir()
    coordinator = CoordinatorProcess(path, kafka.bootstrap, tmp_path)
    coordinator.start()
    procs = [processes.spawn(argv[f"n.r{r}.p0"], logs / f"n{r}.log", env) for r in range(3)]
    mon = ReplicaMonitor(kafka.bootstrap, spec.heartbeat_topic, 1.0)
    workload = readings_workload([f"in_{u}"], COUNT, RATE, sensors=SENSORS)
    topic = spec.restart_topic("n", 0)
    watch = plain_consumer(kafka.bootstrap, "test.watch", unique=True, **{"fetch.wait.max.ms": 5})
    try:
        first = wait_primary(mon, "n", None, 60, replicas=3)
        sources = PacedSources(spec, kafka.bootstrap, workload, RATE).start()
        time.sleep(6.0)
        # From now on the images' writer may write 100 kB/s (a Kafka client quota, measured over the
        # broker's 10 s window): a new primary's first image, over 2 MB, gets its first MB out at
        # once, then crawls, and the kill lands inside it. The deltas behind it wait (a standby that
        # takes over later replays more), which changes nothing in the output.
        set_client_quota(kafka.bootstrap, restart.client_id(topic), 100_000)
        _, end = watch.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        watch.assign([TopicPartition(topic, 0, end)])
        processes.kill(procs[first])
        second = wait_primary(mon, "n", first, 20, replicas=3)
        chunk = _first_chunk(watch)
        processes.pause(procs[second])  # stopped at once, then killed: its image stays torn
        processes.kill(procs[second])
        written = messages_after(kafka.bootstrap, topic, 0, chunk)
        seen = [(m.offset(), m.key(), len(m.value() or b"")) for m in written]
        assert restart.manifest_key(0) not in [m.key() for m in written], f"killed too late: the image is whole: {seen}"
        third = 3 - first - second
        wait_for(lambda: ha_role(mon, "n", third) == "primary", 20, f"r{third} to take over")
        sources.join(120)
        text = (logs / f"n{third}.log").read_text()
        assert "the warm standby takes over" in text, text[-2000:]

        want = evaluate(spec, {f"in_{u}": [workload[f"in_{u}"]]}, ended=True)[f"out_{u}"][0]
        with StreamView(spec, f"out_{u}", kafka.bootstrap, stable_only=True) as view:
            view.read_until(lambda v: bool(v.stable(0)) and v.stable(0)[-1] == want[-1], 120)
            time.sleep(1.0)
            view.poll(timeout=0.5)
            got = view.stable(0)
        assert len(got) == len(want) and got == want, "the output differs from the failure-free run"
    finally:
        watch.close()
        mon.close()
        processes.stop(procs, timeout=20, resume_first=True)
        coordinator.stop()


def _first_chunk(watch: Any) -> int:
    """The offset of the first image chunk the restart topic gets (the new primary's first image),
    read as soon as it lands."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for m in watch.consume(100, 0.005):
            key = m.key() or b""
            if m.error() is None and m.value() is not None and key.startswith(b"p0.") and not key.startswith(b"p0.d"):
                return int(m.offset())
    raise TimeoutError("the new primary wrote no image within 20 s")
