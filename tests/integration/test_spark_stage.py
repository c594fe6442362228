"""The Spark window stage against a real broker, checked tuple for tuple against the batch reference.

One Spark session for the whole module: the stage runs twice on it (input produced in two
phases), so the test also covers state and offsets restored from the Spark checkpoint, ids
continued from the output topic, and a replayed micro-batch that must not duplicate output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from services.client.reader import StreamReader
from services.client.source import SourceWriter, readings
from services.core.admin import TopicSpec, ensure_topics
from services.core.codec import codec_for
from services.core.partitioner import key_bytes, partition_for
from services.core.paths import REPO_ROOT
from services.core.tuples import Tuple, TupleType, make_headers
from services.operators.reference import evaluate
from services.spec import Spec, load_spec
from spark_jobs.session import spark_session
from spark_jobs.sink import StageStats
from spark_jobs.window_stage import run_stage

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SIZE, SLIDE = 10_000, 5_000
LATENESS = SLIDE  # the stage's default: the window slide
PARTITIONS = 2
SENSORS = 300
PHASE1, PHASE2 = 2501, 1500  # readings 10 ms apart; phase 1 ends at +25000 ms, so W hits a window end exactly

SPEC = """\
name: {name}
streams:
  {src}: {{schema: reading, key: sensor, partitions: {parts}}}
  {out}: {{schema: window_stat, key: key, partitions: {parts}}}
operators:
  per_sensor:
    type: window
    input: {src}
    output: {out}
    key: sensor
    size: {size}
    slide: {slide}
    aggregates: {{count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  stats: {{operators: [per_sensor], engine: spark}}
"""

Records = list[dict[str, Any]]


def _write_spec(tmp_path: Path) -> Path:
    uid = uuid.uuid4().hex[:8]
    path = tmp_path / "spark_stage.yaml"
    path.write_text(
        SPEC.format(
            name=f"sparkstage-{uid}",
            src=f"readings_{uid}",
            out=f"stats_{uid}",
            parts=PARTITIONS,
            size=SIZE,
            slide=SLIDE,
        )
    )
    return path


def _expected(spec: Spec, src: str, out: str, recs: Records) -> list[Records]:
    """The reference output restricted to what the stage emits: window_end <= max event time - lateness."""
    parts: list[Records] = [[] for _ in range(PARTITIONS)]
    for r in recs:
        parts[partition_for(key_bytes(r["sensor"]), PARTITIONS)].append(r)
    bound = max(r["ts"] for r in recs) - LATENESS
    # The reference closes windows per partition at that partition's own max time.
    assert bound <= min(max(r["ts"] for r in p) for p in parts)
    ref = evaluate(spec, {src: parts})[out]
    return [[r for r in p if r["window_end"] <= bound] for p in ref]


def _read_all(spec: Spec, out: str, bootstrap: str) -> list[list[Tuple]]:
    """Every tuple of the output topic, per partition in offset order."""
    reader = StreamReader(spec, out, bootstrap)
    try:
        ends = reader.end_offsets()
        got: list[list[Tuple]] = [[] for _ in range(PARTITIONS)]
        deadline = time.monotonic() + 60
        while any((got[p][-1].offset + 1 if got[p] else 0) < ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, "timed out reading the output topic"
            for t in reader.poll(0.5):
                got[t.partition].append(t)
        return got
    finally:
        reader.close()


def _batches(log: Path) -> list[int]:
    """Batch ids in a Spark checkpoint log folder (offsets/ or commits/)."""
    return sorted(int(f.name) for f in log.glob("[0-9]*")) if log.is_dir() else []


def _crash_after_writing(ckpt: Path, batch: int) -> None:
    """Make the checkpoint look as if the stage died right after batch ``batch`` wrote to Kafka.

    That batch and the later ones (which wrote nothing) lose their commit entries, and the
    later ones their offsets too, so a restart re-runs ``batch`` exactly as planned before.
    """
    for log, first in (("commits", batch), ("offsets", batch + 1)):
        for b in _batches(ckpt / log):
            if b >= first:
                (ckpt / log / str(b)).unlink()
                (ckpt / log / f".{b}.crc").unlink(missing_ok=True)


class _Stage:
    """run_stage in a thread, with its result or exception kept for the test."""

    def __init__(self, **kwargs: Any) -> None:
        self.stop = threading.Event()
        self.stats: StageStats | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, kwargs=kwargs, daemon=True)
        self.thread.start()

    def _run(self, **kwargs: Any) -> None:
        try:
            self.stats = run_stage(stop_event=self.stop, **kwargs)
        except BaseException as e:  # reported by the test thread
            self.error = e

    def wait_output(self, reader: StreamReader, seen: list[Tuple], total: int, timeout: float = 120) -> None:
        """Follow the output into ``seen`` until it holds ``total`` tuples (or the stage died)."""
        more = total - len(seen)
        seen.extend(reader.read_until(lambda got: len(got) >= more or not self.thread.is_alive(), timeout=timeout))
        assert self.error is None, f"stage failed: {self.error}"
        assert len(seen) >= total, f"stage wrote {len(seen)} of {total} tuples within {timeout}s"

    def wait_idle(self, ckpt: Path, timeout: float = 60) -> None:
        """Wait until every planned micro-batch is committed (nothing in flight when stopped)."""
        deadline = time.monotonic() + timeout
        settled = 0
        while settled < 3:
            assert time.monotonic() < deadline, "stage did not become idle"
            settled = settled + 1 if _batches(ckpt / "offsets")[-1:] == _batches(ckpt / "commits")[-1:] else 0
            time.sleep(0.3)

    def finish(self) -> StageStats:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "stage did not stop within 60 s of stop_event"
        assert self.error is None, f"stage failed: {self.error}"
        assert self.stats is not None
        return self.stats


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session(app_name="hastream-test-spark-stage")
    try:
        yield session
    finally:
        session.stop()


def test_window_stage_matches_reference(kafka: Any, spark: Any, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap
    spec_path = _write_spec(tmp_path)
    spec = load_spec(spec_path)
    src, out = spec.sources()[0], spec.operators["per_sensor"].output
    ensure_topics(bootstrap, [TopicSpec(t, p) for t, p in spec.all_topics()])
    recs = list(readings(PHASE1 + PHASE2, sensors=SENSORS))
    first, second = recs[:PHASE1], recs[PHASE1:]

    writer = SourceWriter(spec, src, bootstrap)
    for r in first:
        writer.send(r)
    # Neither a tentative tuple (from far in the future: it must not move the watermark)
    # nor a truncated payload may reach the windows.
    writer.send({"sensor": "s0", "ts": first[-1]["ts"] + 3_600_000, "value": 1e6, "seq": -1}, TupleType.TENTATIVE)
    writer.flush()
    bad = codec_for("reading").encode({"sensor": "s0-with-a-long-name", "ts": first[-1]["ts"], "value": 1.0, "seq": 0})[
        :6
    ]
    raw = Producer({"bootstrap.servers": bootstrap})
    raw.produce(
        src,
        bad,
        b"s0",
        partition=partition_for(b"s0", PARTITIONS),
        headers=make_headers(TupleType.STABLE, 10**9, first[-1]["ts"]),
    )
    assert raw.flush(30) == 0

    expected1 = _expected(spec, src, out, first)
    expected = _expected(spec, src, out, recs)
    n1, n = sum(map(len, expected1)), sum(map(len, expected))
    assert 0 < n1 < n
    ckpt = tmp_path / "checkpoint"
    run = dict(spec=spec, node="stats", bootstrap=bootstrap, checkpoint_dir=ckpt, trigger_ms=200, spark=spark)

    reader = StreamReader(spec, out, bootstrap)
    seen: list[Tuple] = []
    try:
        # Phase 1: several micro-batches (the offsets cap), then a stop once all is committed.
        stage = _Stage(max_offsets_per_trigger=800, **run)
        stage.wait_output(reader, seen, n1)
        stage.wait_idle(ckpt)
        stats1 = stage.finish()
        assert stats1.batches > 3 and sum(stats1.written.values()) == n1
        # As if the stage had died after its last output reached Kafka but before Spark
        # committed that batch: the restart recomputes it and must not write it twice.
        last = max(stats1.batch_writes)
        _crash_after_writing(ckpt, last)

        # Phase 2: the rest of the input, read by a restarted stage on the same checkpoint.
        for r in second:
            writer.send(r)
        writer.flush()
        stage = _Stage(**run)
        stage.wait_output(reader, seen, n)
        stage.wait_idle(ckpt)
        stats2 = stage.finish()
        assert stats2.skipped == stats1.batch_writes[last]
        assert sum(stats2.written.values()) == n - n1
    finally:
        reader.close()

    got = _read_all(spec, out, bootstrap)
    for p in range(PARTITIONS):
        assert [t.value for t in got[p]] == expected[p], f"partition {p} differs from the reference"
        assert [t.meta.id for t in got[p]] == list(range(len(got[p])))
        for t in got[p]:
            assert t.value is not None and t.key is not None
            assert t.meta.type is TupleType.STABLE
            assert t.meta.stime == t.value["window_end"]
            assert (t.meta.replica, t.meta.epoch) == (0, 0)
            assert t.key == t.value["key"].encode()
            assert zlib.crc32(t.key) % PARTITIONS == p


@pytest.mark.parametrize(
    "args, fragment",
    [
        ([], "required"),
        (["{spec}", "stats", "--replica", "x"], "invalid int value"),
        (["/nonexistent/spec.yaml", "stats"], "no such file"),
        (["{spec}", "nosuchnode"], "no node 'nosuchnode'"),
        (["{spec}", "stats", "--replica", "3", "--bootstrap", "127.0.0.1:1"], "replica 3 does not exist"),
        (["{spec}", "stats", "--lateness-ms", "-5"], "--lateness-ms must be >= 0"),
        (["{spec}", "stats"], "no Kafka bootstrap servers"),
    ],
)
def test_cli_bad_args_give_one_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    spec_path = _write_spec(tmp_path)
    argv = [a.format(spec=spec_path) for a in args]
    env = {k: v for k, v in os.environ.items() if k != "HASTREAM_BOOTSTRAP"}
    proc = subprocess.run(
        [sys.executable, "-m", "spark_jobs.window_stage", *argv],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr
