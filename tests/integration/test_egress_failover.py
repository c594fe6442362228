"""A replicated egress under the coordinator, on a real broker, through kill -9 and SIGSTOP of its
primary (the one replaced while stopped stands by and takes over again) and kill -9 of a replica (the
primary, under an HA scheme) of the node it follows, for DPC and
every HA scheme, precise and rollback: a plain read_committed consumer, in Python and the Kafka
distribution's Java console consumer, reads the failure-free stable output, in order, once, even where
the node's log repeats."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from infra.kafka.tools import console_consume
from services.core.kafka import READ_COMMITTED, plain_consumer
from services.deploy import processes
from services.egress.records import record_id
from services.spec.egress import egress_node
from tests.integration.ha_rig import HaRig
from tests.integration.helpers import wait_for, wait_primary

pytestmark = pytest.mark.integration

CHAIN = """\
name: egf-{u}
defaults: {partitions: 1}
streams:
  in_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor, egress: {replicas: 2, commit_ms: 100}}
operators:
  twice: {type: map, input: in_{u}, output: out_{u}, fields: {sensor: sensor, ts: ts, value: "value * 2", seq: seq}}
nodes:
  n: {operators: [twice], replicas: 2, HA}
"""
SCHEMES = {
    "dpc": "ha: dpc",
    "active_standby": "ha: {scheme: active_standby, recovery: rollback, interval_ms: 200}",
    "passive_standby": "ha: {scheme: passive_standby, recovery: precise, interval_ms: 50}",
    "upstream_backup": "ha: {scheme: upstream_backup, recovery: rollback, interval_ms: 200}",
    "upstream_backup_precise": "ha: {scheme: upstream_backup, recovery: precise, interval_ms: 50}",
}
RATE, COUNT = 200, 2400  # 12 s of input


@pytest.mark.slow  # the default suite has the DPC chain's (tests/faults/test_egress_schedules.py)
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_a_plain_consumer_reads_the_failure_free_output_once_through_egress_and_node_failures(
    kafka: Any, tmp_path: Path, scheme: str
) -> None:
    rig = HaRig(kafka.bootstrap, tmp_path, CHAIN.replace("HA", SCHEMES[scheme]), COUNT, RATE)
    stream = f"out_{rig.u}"
    egress = egress_node(stream, "stable")
    topic = f"{rig.spec.name}.{stream}.stable"

    def primary(other_than: int | None = None) -> int:
        return wait_primary(rig.mon, egress, other_than, 30)

    try:
        for r in (0, 1):
            rig.start("n", r)
            rig.start(egress, r)
        first = primary()
        rig.feed()
        time.sleep(2.5)

        # kill -9 of the egress primary mid-stream: the other replica fences it and goes on after its tail
        processes.kill(rig.proc(egress, first))
        second = primary(first)
        rig.start(egress, first)
        rig.rejoined(egress, first, 30)

        # kill -9 of a replica of the node the egress follows (the primary of an HA node), then its restart
        victim = rig.primary("n", None, 20) if scheme != "dpc" else 0
        processes.kill(rig.proc("n", victim))
        time.sleep(1.5)
        rig.start("n", victim)

        # SIGSTOP of the new egress primary past its detection: replaced, it wakes up fenced and steps
        # down in place; kill -9 of the primary then finds it standing by, with no restart
        processes.pause(rig.proc(egress, second))
        assert primary(second) == first
        time.sleep(0.5)
        processes.resume(rig.proc(egress, second))
        rig.rejoined(egress, second, 20)
        assert processes.alive(rig.proc(egress, second)), "the replaced egress primary ended instead of standing by"
        said = rig.log(egress, second)
        assert "stepping down from primary" in said, said[-2000:]
        processes.kill(rig.proc(egress, first))
        assert primary(first) == second

        want, _ = rig.outputs(stream, 90)
        got = _read_committed(kafka.bootstrap, topic, len(want))
        assert [json.loads(v) for _, v, _ in got] == want, "the egress topic differs from the failure-free output"
        assert [record_id(h) for _, _, h in got] == list(range(len(want))), "ids skipped or repeated"
        assert all(k == w["sensor"].encode() for (k, _, _), w in zip(got, want, strict=True)), "keys differ"

        java = console_consume(kafka.bootstrap, topic, len(want) + 1, timeout_s=10)
        assert [(k, json.loads(v)) for k, v in java] == [(w["sensor"], w) for w in want], "the Java consumer differs"
    finally:
        rig.close()


def _read_committed(bootstrap: str, topic: str, expect: int, timeout: float = 60) -> list[tuple[Any, ...]]:
    """What a plain read_committed consumer reads of partition 0: (key, value, headers), until ``expect``
    records and two quiet seconds more (a duplicate would come in them)."""
    c = plain_consumer(bootstrap, "egress-failover-test", unique=True, **READ_COMMITTED)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[Any, ...]] = []
    quiet = [time.monotonic() + timeout]

    def done() -> bool:
        for m in c.consume(500, 0.2):
            if m.error() is None:
                got.append((m.key(), m.value(), dict(m.headers() or [])))
        if len(got) < expect:
            return False
        quiet[0] = min(quiet[0], time.monotonic() + 2)
        return time.monotonic() >= quiet[0]

    try:
        wait_for(done, timeout + 5, f"{expect} records on {topic}")
    finally:
        c.close()
    return got
