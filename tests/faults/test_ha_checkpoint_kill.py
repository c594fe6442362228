"""Kill -9 of a passive standby primary in the middle of writing a checkpoint image (ICDE 2005,
section 5.1; the torn write of ``services.node.restart``).

Three replicas of a window node with a large state (a minute sliding by 5 s over 100,000 sensors: an
image of a few 1 MiB chunks). The first primary is killed; the replica that takes over writes
the first image of its own chain, slowed by a Kafka client quota on the images' writer, and is
stopped and killed as soon as its first chunk reaches the log, before the manifest. The third replica, a warm standby that had followed the first
primary's deltas and ignored the torn image, takes over from them. Passive standby promises
precise recovery here (a deterministic node), so the output must equal the failure-free output
tuple for tuple. The detection time is 3 s: a collection of the garbage collector over a state
of this size may stop the process for a few hundred ms, and a takeover that replays the input
the throttled deltas held back may stop its loop for over 1 s; a shorter one would take the new
primary for failed while it catches up, and the third replica would take over from it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from infra.kafka.cluster import set_client_quota
from services.core.kafka import plain_consumer
from services.deploy import processes
from services.log import images
from services.log.tail import messages_after
from tests.integration.ha_rig import HaRig
from tests.integration.helpers import ha_role, wait_for

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
                                         heartbeat_ms: 100, misses: 30}}
"""
RATE, COUNT, SENSORS = 1000, 20_000, 100_000  # input flows on past both kills


def test_a_primary_killed_while_writing_an_image_is_recovered_precisely(kafka: Any, tmp_path: Path) -> None:
    rig = HaRig(kafka.bootstrap, tmp_path, SPEC, COUNT, RATE, sensors=SENSORS)
    for r in range(3):
        rig.start("n", r)
    topic = rig.spec.restart_topic("n", 0)
    watch = plain_consumer(kafka.bootstrap, "test.watch", unique=True, **{"fetch.wait.max.ms": 5})
    try:
        first = rig.primary("n", None, 60)
        rig.feed()
        time.sleep(6.0)
        # From now on the images' writer may write 100 kB/s (a Kafka client quota, measured over the
        # broker's 10 s window): a new primary's first image, over 2 MB, gets its first MB out at
        # once, then crawls, and the kill lands inside it. The deltas behind it wait (a standby that
        # takes over later replays more), which changes nothing in the output.
        set_client_quota(kafka.bootstrap, images.client_id(topic), 100_000)
        _, end = watch.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        watch.assign([TopicPartition(topic, 0, end)])
        processes.kill(rig.proc("n", first))
        second = rig.primary("n", first)
        chunk = _first_chunk(watch)
        processes.pause(rig.proc("n", second))  # stopped at once, then killed: its image stays torn
        processes.kill(rig.proc("n", second))
        written = messages_after(kafka.bootstrap, topic, 0, chunk)
        seen = [(m.offset(), m.key(), len(m.value() or b"")) for m in written]
        assert images.manifest_key(0) not in [m.key() for m in written], f"killed too late: the image is whole: {seen}"
        third = 3 - first - second
        wait_for(lambda: ha_role(rig.mon, "n", third) == "primary", 20, f"r{third} to take over")
        want, got = rig.outputs(f"out_{rig.u}", 120)
        took = re.search(
            r"the warm standby takes over at checkpoint \d+ \(\d+ images and (\d+) deltas", rig.log("n", third)
        )
        assert took is not None and int(took[1]) > 0, rig.log("n", third)[-2000:]  # it followed the deltas
        rig.assert_precise(f"out_{rig.u}", want, got)
    finally:
        watch.close()
        rig.close()


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
