"""An egress on a real broker: a plain read_committed consumer reads every stable tuple of a node's
output exactly once, in id order per partition, across a writer that stopped mid-transaction and the
new one that took its partitions over; the latest topic, materialized, is the stable results."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from services.client.workload import readings
from services.core.codec import codec_for
from services.core.errors import FencedError
from services.core.kafka import READ_COMMITTED, BatchProducer, plain_consumer
from services.core.partitioner import key_bytes, partition_for
from services.core.tuples import BOUNDARY, STABLE, TENTATIVE, UNDO, TupleType, make_headers
from services.egress.latest import KIND_HEADER
from services.egress.position import last_written_id
from services.egress.pump import EgressPump
from services.egress.records import ID_HEADER
from tests.integration.helpers import create_topics, hastream, one_error_line, unique_spec, user_env, wait_for

pytestmark = pytest.mark.integration

SPEC = """\
name: eg-{u}
streams:
  a: {schema: reading, key: sensor, partitions: 2}
  b: {schema: reading, key: sensor, partitions: 2, egress: [{mode: stable, commit_ms: 50}, {mode: latest}]}
operators:
  keep: {type: filter, input: a, output: b, where: "True"}
nodes:
  n: {operators: [keep]}
"""
N = 300


def _write_log(bootstrap: str, topic: str, steps: Sequence[tuple[int, TupleType, int, dict | None]]) -> None:
    """Node n's output log as its replica writes it: (partition, type, id, record) per message."""
    encode, p = codec_for("reading").encode, BatchProducer(bootstrap)
    for part, ttype, tid, rec in steps:
        value = encode(rec) if rec is not None else None
        stime = rec["ts"] if rec is not None else tid
        p.send(topic, value, key_bytes(rec["sensor"]) if rec else None, part, make_headers(ttype, tid, stime))
    p.flush()


def _by_partition() -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {0: [], 1: []}
    for r in readings(N, sensors=6, seed=4, step_ms=10):
        out[partition_for(key_bytes(r["sensor"]), 2)].append(r)
    return out


def _read(bootstrap: str, topic: str) -> dict[int, list[tuple[Any, ...]]]:
    """What a plain read_committed consumer reads: per partition, (key, value, headers) in order."""
    c = plain_consumer(bootstrap, "egress-test", unique=True, **READ_COMMITTED)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
    got: dict[int, list[tuple[Any, ...]]] = {0: [], 1: []}
    quiet = time.monotonic() + 5
    try:
        while time.monotonic() < quiet:
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    got[m.partition() or 0].append((m.key(), m.value(), dict(m.headers() or [])))
                    quiet = time.monotonic() + 1.5
    finally:
        c.close()
    return got


def _pump_until(pump: EgressPump, done: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        pump.step()
    state = [
        (w.next_id, v.last_stable, v.gap, v.duplicates, v.fenced)
        for w, v in zip(pump.stable.values(), pump.view.views, strict=False)
    ]
    assert done(), f"the egress did not get there in time: (next id, last stable, gap, duplicates, fenced) {state}"


def test_a_plain_consumer_reads_each_stable_tuple_once_across_a_writer_stopped_mid_transaction(
    kafka: Any, tmp_path: Path
) -> None:
    spec, _ = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    stable = spec.streams["b"].egress[0]
    parts = _by_partition()
    half = [(p, STABLE, i, r) for p in (0, 1) for i, r in enumerate(parts[p][: len(parts[p]) // 2])]
    _write_log(kafka.bootstrap, spec.topic("b"), half)

    old = EgressPump(spec, "b", stable, kafka.bootstrap)
    _pump_until(old, lambda: all(w.next_id == len(parts[p]) // 2 for p, w in old.stable.items()))
    _pump_until(old, lambda: not any(w.writer.open for w in old.stable.values()))  # committed within commit_ms
    rest = [(p, STABLE, i, r) for p in (0, 1) for i, r in enumerate(parts[p]) if i >= len(parts[p]) // 2]
    for w in old.stable.values():
        w.batches.commit_s = 3600.0  # from here on it sends and never commits
    _write_log(kafka.bootstrap, spec.topic("b"), [m for m in rest if m[0] == 0])
    _pump_until(old, lambda: old.stable[0].next_id == len(parts[0]))
    assert old.stable[0].writer.open
    for producer in old.producers.values():
        producer.poll(0.5)  # what it sent is on the broker, in a transaction it never commits: it stops here

    new = EgressPump(spec, "b", stable, kafka.bootstrap)  # takes every partition over
    # It goes on after what was committed, never after what the stopped writer left open.
    assert [w.next_id for w in new.stable.values()] == [len(parts[p]) // 2 for p in (0, 1)]
    _write_log(kafka.bootstrap, spec.topic("b"), [m for m in rest if m[0] == 1])
    _pump_until(new, lambda: all(w.next_id == len(parts[p]) for p, w in new.stable.items()))
    new.close()
    with pytest.raises(FencedError):
        for w in old.stable.values():
            w.writer.commit()

    got = _read(kafka.bootstrap, new.topic)
    for p in (0, 1):
        assert [json.loads(v) for _, v, _ in got[p]] == parts[p], f"partition {p}: not each stable tuple once, in order"
        assert [int(h[ID_HEADER]) for _, _, h in got[p]] == list(range(len(parts[p])))
        assert all(k == key_bytes(json.loads(v)["sensor"]) for k, v, _ in got[p])


def test_the_latest_topic_materialized_is_the_stable_results_after_a_tentative_run(kafka: Any, tmp_path: Path) -> None:
    spec, _ = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    latest = spec.streams["b"].egress[1]
    recs = _by_partition()[0][:40]
    made_up = dict(recs[25], value=-1.0)
    steps = [(0, STABLE, i, r) for i, r in enumerate(recs[:20])] + [(0, BOUNDARY, 10**3, None)]
    steps += [(0, TENTATIVE, 20, recs[20]), (0, TENTATIVE, 21, made_up)]  # then an UNDO and the corrections
    _write_log(kafka.bootstrap, spec.topic("b"), steps)
    pump = EgressPump(spec, "b", latest, kafka.bootstrap)
    _pump_until(pump, lambda: pump.latest[0].shown)
    pump.step()
    pump.latest[0].flush()
    during = _table(_read(kafka.bootstrap, pump.topic)[0])
    assert during[b"21"] == (made_up, b"tentative") and during[b"19"] == (recs[19], b"stable")

    fix = [(0, UNDO, 19, None)] + [(0, STABLE, i, r) for i, r in enumerate(recs) if i >= 20]
    _write_log(kafka.bootstrap, spec.topic("b"), fix + [(0, BOUNDARY, 10**9, None)])
    _pump_until(pump, lambda: pump.view.views[0].last_stable == len(recs) - 1)
    pump.step()
    pump.close()
    healed = _table(_read(kafka.bootstrap, pump.topic)[0])
    assert healed == {b"%d" % i: (r, b"stable") for i, r in enumerate(recs)}


def _table(records: list[tuple[Any, ...]]) -> dict[bytes, tuple[dict, bytes]]:
    """The topic materialized: the newest value per key, a tombstone deleting it."""
    out: dict[bytes, tuple[dict, bytes]] = {}
    for key, value, headers in records:
        if value is None:
            out.pop(key, None)
        else:
            out[key] = (json.loads(value), headers[KIND_HEADER])
    return out


def test_the_egress_process_killed_and_started_again_writes_each_stable_tuple_once(kafka: Any, tmp_path: Path) -> None:
    """kill -9 of ``hastream egress`` while the log grows (it dies with a transaction open, most likely),
    then a new one: a plain read_committed consumer reads the failure-free stable stream exactly."""
    spec, path = unique_spec(SPEC, tmp_path)
    create_topics(spec, kafka.bootstrap)
    parts = _by_partition()
    log = [(p, STABLE, i, r) for p in (0, 1) for i, r in enumerate(parts[p])]
    log.sort(key=lambda m: (m[3] or {}).get("ts", 0))
    env = {**user_env(tmp_path / "home"), "HASTREAM_BOOTSTRAP": kafka.bootstrap}
    cmd = [sys.executable, "-m", "services.cli.main", "egress", str(path), "b"]
    topic = f"{spec.name}.b.stable"
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _write_log(kafka.bootstrap, spec.topic("b"), log[: len(log) // 2])
        wait_for(lambda: last_written_id(kafka.bootstrap, topic, 0) is not None, 60, "the first egress's first commit")
        for i in range(len(log) // 2, len(log), 10):  # 10 tuples every 20 ms, as a node writes them
            _write_log(kafka.bootstrap, spec.topic("b"), log[i : i + 10])
            time.sleep(0.02)
            if i >= len(log) * 3 // 4 and first.poll() is None:  # once, with a quarter still to come
                os.kill(first.pid, signal.SIGKILL)
                first.wait(10)
    finally:
        first.kill()
        first.wait(10)
    second = subprocess.run([*cmd, "--idle", "3"], env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr[-3000:]
    written = int(re.search(r"(\d+) stable tuples written", second.stdout)[1])  # type: ignore[index]
    assert 0 < written < len(log), f"the second egress did not go on after the first one's commits: {written}"
    got = _read(kafka.bootstrap, f"{spec.name}.b.stable")
    for p in (0, 1):
        assert [json.loads(v) for _, v, _ in got[p]] == parts[p], f"partition {p}: not each stable tuple once, in order"
    tailed = hastream("tail", str(path), "b", "--egress", "stable", "--json", "--idle", "3", env=env)
    assert tailed.returncode == 0, tailed.stderr[-3000:]
    lines = [json.loads(line) for line in tailed.stdout.splitlines()]
    for p in (0, 1):
        mine = [x for x in lines if x["partition"] == p]
        assert [x["value"] for x in mine] == parts[p] and [x["id"] for x in mine] == list(range(len(parts[p])))


def test_bad_use_of_the_egress_command_is_one_line(tmp_path: Path) -> None:
    spec, path = unique_spec(SPEC.replace(", {mode: latest}", ""), tmp_path)
    env = user_env(tmp_path / "home")
    one_error_line(hastream("egress", str(path), "a", "--mode", "latest", env=env), "has no 'latest' egress")
    one_error_line(hastream("egress", str(path), "zz", env=env), "no stream 'zz'")
    one_error_line(hastream("tail", str(path), "b", "--egress", "latest", env=env), "has no 'latest' egress")
