"""Kill -9 and SIGSTOP of an upstream backup primary right as the coordinator trims its input log
(ICDE 2005, section 5.2, queue trimming).

A window node of two replicas under upstream backup; the coordinator deletes the records of its
input log below the primary's level-1 acknowledgement every interval. Each fault waits until it
sees the log's start move, then strikes at once: the takeover must rebuild from the newest ack,
whose input the trim has just left as the log's first records, and nothing the trim removed
may be needed. Twice (kill -9, then SIGSTOP of the new primary past the detection time, with a
rejoin between). Upstream backup promises precise recovery here, so the output must equal the
failure-free output tuple for tuple.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from services.client.source import SourceWriter
from services.client.view import StreamView
from services.core.codec import codec_for
from services.deploy import processes
from services.log.tail import first_offset
from services.operators.reference import evaluate
from tests.integration.ha_rig import HaRig
from tests.integration.helpers import wait_for
from tests.integration.test_ha_failover import UPSTREAM as SPEC  # a window node of two replicas

pytestmark = pytest.mark.integration

RATE, COUNT = 200, 2400  # 12 s of input


def test_a_primary_failing_right_as_its_input_is_trimmed_is_recovered_precisely(kafka: Any, tmp_path: Path) -> None:
    rig = HaRig(kafka.bootstrap, tmp_path, SPEC, COUNT, RATE)
    topic = f"{rig.spec.name}.{rig.input}"
    for r in (0, 1):
        rig.start("n", r)
    try:
        first = rig.primary("n", None, 60)
        rig.feed()
        time.sleep(2.5)

        _trimmed(kafka.bootstrap, topic)
        processes.kill(rig.proc("n", first))  # right after a trim
        second = rig.primary("n", first)
        rig.start("n", first)
        rig.rejoined("n", first, 30)
        time.sleep(1.0)

        _trimmed(kafka.bootstrap, topic)
        processes.pause(rig.proc("n", second))  # right after a trim, past the detection time
        assert rig.primary("n", second) == first
        processes.resume(rig.proc("n", second))
        assert processes.wait_gone(rig.proc("n", second), 20), "the replaced primary went on running after it woke up"
        want, got = rig.outputs(f"out_{rig.u}", 60)
        for text in (rig.log("n", second), rig.log("n", first, 2)):
            assert "rebuilding from the ack of cut" in text, text[-2000:]  # from an ack, not from the start
        rig.assert_precise(f"out_{rig.u}", want, got)
    finally:
        rig.close()


def _trimmed(bootstrap: str, topic: str) -> None:
    """Returns as soon as the log's start moves: a trim has just been made."""
    start = first_offset(bootstrap, topic, 0)
    deadline = time.monotonic() + 20
    while first_offset(bootstrap, topic, 0) == start:
        assert time.monotonic() < deadline, f"{topic} was not trimmed within 20 s"


# A window node w of a recovery scheme that reads its output log back at a takeover, read only by a
# stateless upstream backup node r: r's acks follow w's output within about its interval (50 ms),
# so the coordinator's trims of w's log would pass w's own restart point (its newest checkpoint,
# ack or trim message, up to w's interval of 1 s old).
WRITER = """\
name: wtrim-{u}
defaults: {partitions: 1}
streams:
  in_{u}: {schema: reading, key: sensor}
  mid_{u}: {schema: window_stat, key: key}
  out_{u}: {schema: window_stat, key: key}
operators:
  win: {type: window, input: in_{u}, output: mid_{u}, key: sensor, size: 500, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  same: {type: filter, input: mid_{u}, output: out_{u}, where: "True"}
nodes:
  w: {operators: [win], replicas: 2, ha: {scheme: SCHEME, recovery: precise, interval_ms: 1000}}
  r: {operators: [same], replicas: 1, ha: {scheme: upstream_backup, interval_ms: 50}}
"""


@pytest.mark.parametrize(
    "scheme",
    [
        "active_standby",
        pytest.param("passive_standby", marks=pytest.mark.slow),
        pytest.param("upstream_backup", marks=pytest.mark.slow),
    ],
)
def test_a_writer_read_only_by_a_stateless_upstream_backup_node_takes_over_precisely(
    kafka: Any, tmp_path: Path, scheme: str
) -> None:
    """ha-review D1(a): the trims of w's log never pass what w's takeover checks, so the takeover does
    not stop on missing ids (in a loop, every replica alike); its log, checked from its trimmed start,
    holds the failure-free output's tail once, and r's output is the failure-free output."""
    rig = HaRig(kafka.bootstrap, tmp_path, WRITER.replace("SCHEME", scheme), COUNT, RATE)
    mid = f"{rig.spec.name}.mid_{rig.u}"
    for node, r in (("w", 0), ("w", 1), ("r", 0)):
        rig.start(node, r)
    try:
        first = rig.primary("w", None, 60)
        rig.primary("r", None, 60)
        rig.feed()
        time.sleep(3.0)
        _trimmed(kafka.bootstrap, mid)
        processes.kill(rig.proc("w", first))
        rig.primary("w", first)
        rig.start("w", first)
        want, got = rig.outputs(f"out_{rig.u}", 60)
        rig.assert_precise(f"out_{rig.u}", want, got)
        want_mid = evaluate(rig.spec, {rig.input: [rig.workload[rig.input]]}, ended=True)[f"mid_{rig.u}"][0]
        stored = rig.stored(f"mid_{rig.u}")
        first_id = stored[0][0]
        assert first_id > 0, f"{mid} was never trimmed: the test shows nothing"
        assert [tid for tid, _ in stored] == list(range(first_id, len(want_mid))), f"{mid}: ids not each once"
        decode = codec_for("window_stat").decode
        assert [decode(value) for _, (_, (value, _)) in stored] == want_mid[first_id:], (
            f"{mid}: not the failure-free output"
        )
    finally:
        rig.close()


SOURCE = """\
name: srctrim-{u}
defaults: {partitions: 1}
streams:
  in_{u}: {schema: reading, key: sensor}
  mid_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  twice: {type: map, input: in_{u}, output: mid_{u}, fields: {sensor: sensor, ts: ts, value: "value * 2", seq: seq}}
  same: {type: filter, input: mid_{u}, output: out_{u}, where: "True"}
nodes:
  w: {operators: [twice], replicas: 2, ha: {scheme: SCHEME, recovery: precise, interval_ms: 50}}
  n: {operators: [same], replicas: 1, ha: {scheme: upstream_backup, recovery: precise, interval_ms: 50}}
"""
# The source alone, read by n.
SOURCE_ONLY = """\
name: srctrim-{u}
defaults: {partitions: 1}
streams:
  in_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  twice: {type: map, input: in_{u}, output: out_{u}, fields: {sensor: sensor, ts: ts, value: "value * 2", seq: seq}}
nodes:
  n: {operators: [twice], replicas: 1, ha: {scheme: upstream_backup, recovery: precise, interval_ms: 50}}
"""


@pytest.mark.parametrize("writer", [None, "upstream_backup", pytest.param("passive_standby", marks=pytest.mark.slow)])
def test_a_log_whose_reader_acked_all_of_it_keeps_its_writers_tail(
    kafka: Any, tmp_path: Path, writer: str | None
) -> None:
    """ha-review D1(b, c): the only reader of a log, a stateless upstream backup node, acks all of it.
    The trims must leave the writer's tail: else a restarted source writer starts again at id 0 and
    epoch 1 and the reader dead-letters every new tuple (silent loss of all new input), and a node
    writer's takeover replays from offset 0 into trimmed input or renumbers its output from id 0.
    The source's writer stops, the log's writer w is taken over (if a node), the source's writer
    restarts: the output is the failure-free output."""
    text = SOURCE_ONLY if writer is None else SOURCE.replace("SCHEME", writer)
    rig = HaRig(kafka.bootstrap, tmp_path, text, 400, 200)
    topic = f"{rig.spec.name}.{rig.input if writer is None else 'mid_' + rig.u}"
    nodes = [("n", 0)] if writer is None else [("w", 0), ("w", 1), ("n", 0)]
    for node, r in nodes:
        rig.start(node, r)
    try:
        rig.primary("n", None, 60)
        recs = rig.workload[rig.input]
        recs = recs[:200] + [{**r, "ts": r["ts"] + 1000} for r in recs[200:]]  # after a pause of 1 s
        first = SourceWriter(rig.spec, rig.input, kafka.bootstrap)
        for k in range(0, 200, 10):  # paced, as a source sends: a batch and its boundary
            for rec in recs[k : k + 10]:
                first.send(rec)
            # the last boundary moves time on past the last tuple's bucket: the reader acks all it read
            first.boundary(recs[k + 9]["ts"] + (1 if k < 190 else 500))
            first.flush()
            time.sleep(0.1)
        # and the writer stops
        wait_for(lambda: first_offset(kafka.bootstrap, topic, 0) > 0, 20, f"a trim of {topic}")
        time.sleep(2.0)  # the trims catch up with the reader's last ack
        if writer is not None:
            old = rig.primary("w")
            processes.kill(rig.proc("w", old))
            rig.primary("w", old)
            rig.start("w", old)
        second = SourceWriter(rig.spec, rig.input, kafka.bootstrap)  # the writer's restart
        for rec in recs[200:]:
            second.send(rec)
        second.end()
        want = evaluate(rig.spec, {rig.input: [recs]}, ended=True)[f"out_{rig.u}"][0]
        with StreamView(rig.spec, f"out_{rig.u}", kafka.bootstrap, stable_only=True) as view:
            view.read_until(lambda v: len(v.stable(0)) >= len(want), 60)
            assert view.stable(0) == want, "the reader lost or changed input after the writers' restarts"
    finally:
        rig.close()
