"""Throughput and end-to-end latency of hastream nodes, measured through a real Kafka broker.

    python -m bench.throughput [--tuples N] [--quick] [--bootstrap HOST:PORT] [--profile]

Six processors move the same input (``reading`` tuples with the ``ht`` header, written by
``SourceWriter``) from one input topic to an output topic:

* ``bare``: a bare confluent-kafka loop (consume a batch, produce each message's value, key and
  headers, flush, commit): what one Python process can move at best, the baseline;
* ``avro``: the same loop doing the filter+map node's work by hand: decode each reading with the
  parsed schema, filter, map, encode, produce (no headers), as a Python application does with
  fastavro's public ``schemaless_reader``/``schemaless_writer`` (hastream's codec calls the
  functions they wrap, ``services.core.codec``);
* ``filter+map``: a ``NodeService`` running a filter that keeps every tuple and a map, like the
  demo's ingest node, so it writes as many tuples as the bare loop;
* ``window``: a ``NodeService`` running a keyed sliding-window aggregate;
* ``quix filter+map`` and ``quix window``: the same two as a Quix Streams application
  (``bench/quix_app.py``, in the virtualenv ``make peers`` builds under ``$HASTREAM_HOME/peers``,
  since Quix Streams pins an older confluent-kafka; its rows are skipped with a message without it).

Before any figure is quoted, the results of every processor's first run are decoded and compared
(``compare_outputs``): the Avro loop's and Quix's filter+map record for record with the node's,
each of Quix's windows with the window node's (Quix leaves the windows of the last event times
open, having no end of input). The goals (``check_goals``) are checked against the baselines of
the same run.

The nodes run the full Borealis DPC machinery of a failure-free deployment (one replica): input
SUnion, SOutput numbering, heartbeat and monitor threads, a persisted checkpoint every
``dpc.checkpoint_interval``. As a DPC source must, the input carries BOUNDARY tuples: one every
``dpc.boundary_interval`` of wall clock while it is written (``SourceWriter.maybe_boundary``) and a
final one at stime 2**62, so SUnion releases every bucket as STABLE. The bare loop copies the
boundaries like any message; a node consumes them and writes its own. Each run checks its
output topic: a node's results are its STABLE data tuples only (BOUNDARY is control), their ids
must be dense from 0, and any TENTATIVE, UNDO or REC_DONE tuple fails the benchmark (it would
mean boundaries were missing and SUnion timed out). A dead-lettered input fails it too.

Each processor runs in its own process (``--worker``, not part of the public interface), so the
harness's own work (pacing, progress) never competes with it for the GIL. The bare loop uses the
raw clients of ``BatchConsumer``/``BatchProducer`` (so exactly the nodes' client settings, whatever
they become) and the same ``HASTREAM_BATCH_SIZE``/``HASTREAM_POLL_TIMEOUT_MS``/``HASTREAM_LINGER_MS``,
so the comparison isolates what the node adds per tuple.

Definitions (also written to the JSON file):

* Every topic the benchmark creates uses ``message.timestamp.type=LogAppendTime``, so every
  timestamp below comes from the broker's clock when it appended the message.
* Throughput (phase 1, pre-loaded input): input data tuples / seconds from the moment the
  processor received its first batch to the end of its last batch (the later of its own stamp
  after producing the last batch and the append time of its last output message, which covers
  the final flush). Processor start-up is excluded; it is the median over ``--repeat`` runs.
  CPU per tuple is the worker process's CPU time (all its threads) per input data tuple.
* Latency (phase 2, input produced at a fixed ``--rate`` while the processor runs): per output
  data tuple, its append time minus the append time of the input tuple it came from. For the
  bare loop and the filter+map node that is the input with the same ``seq`` field; for the window
  node it is the input tuple that closed the window (the first one, in log order, whose event
  time is >= the window end; event time is the wall clock at generation, so windows close in real
  time). Inputs of the first second (warm-up) and after the source's last periodic boundary
  (released early by the final one) are not counted. A node with one input passes its stable
  tuples through as they arrive (``services.dpc.sunion``), so neither waits for a boundary: the
  window closes on the first tuple past its end, as Quix's does.
* DPC cost (phase 3, in process, no Kafka): CPU per tuple of SUnion and SOutput beside the
  operators themselves (``bench/dpc_cost.py``).

Results go to ``bench/results/throughput.json`` (figures plus machine info).
"""

from __future__ import annotations

import argparse
import bisect
import cProfile
import datetime as dt
import gc
import io
import json
import logging
import math
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import fastavro
from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_LOG_APPEND_TIME, Producer, TopicPartition
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.borealis.common import machine
from bench.workload import END_OF_TIME
from services.client.source import SourceWriter, pump, readings
from services.core.admin import TopicSpec, delete_topics, ensure_topics
from services.core.codec import codec_for
from services.core.config import Settings
from services.core.errors import HeaderError
from services.core.kafka import BatchConsumer, BatchProducer, plain_consumer
from services.core.paths import REPO_ROOT, hastream_home
from services.core.tuples import NO_TIME, RawHeaders, TupleType, read_headers
from services.deploy import processes
from services.deploy.local import topic_specs
from services.dpc.sunion import STuple, SUnion
from services.spec import Spec, parse_spec

RESULTS = REPO_ROOT / "bench" / "results" / "throughput.json"
PLOT = REPO_ROOT / "docs" / "throughput.png"
PROFILE_OUT = REPO_ROOT / "bench" / "results" / "filter_node.prof"
# What hastream aims at on this machine, against baselines measured in the same run.
MIN_X_AVRO = 0.9  # filter+map tuples/s against the bare Avro loop doing the same work
MIN_X_QUIX = 5.0  # filter+map and window tuples/s against Quix Streams
P50_OVER_QUIX_MS = {"filter+map": 2.0, "window": 10.0}  # p50 latency at most Quix's plus this
MAX_P99_MS = 20.0  # filter+map p99 latency
WARMUP_S = 1.0
SENSORS = 20
WINDOW_SIZE_MS, WINDOW_SLIDE_MS = 2000, 500
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}
PROCESSORS = ("bare", "avro", "filter+map", "window", "quix filter+map", "quix window")
LATENCY_PROCESSORS = PROCESSORS
PEERS = ("quix filter+map", "quix window")  # run in their own virtualenv (``peers_python``)
PEERS_VENV = "peers"  # under HASTREAM_HOME: `make peers` installs Quix Streams there
FINAL_BOUNDARY = END_OF_TIME  # the sources' last BOUNDARY: nothing more will come, every bucket is complete
NOT_RESULTS = ("TENTATIVE", "UNDO", "REC_DONE")
DATA = "DATA"  # a peer's (or the Avro loop's) output record: no ht header
RESULTS_TYPES = ("STABLE", DATA)  # must never appear in a failure-free node's output

console = Console(stderr=True, highlight=False)  # progress and status
out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)  # the figures


# ---------------------------------------------------------------------------- specs


def _dpc_section(bucket_ms: int | None) -> str:
    """A spec's dpc section with SUnion buckets and boundaries every ``bucket_ms`` (the paper's
    setting for its serialization overhead), or nothing for the defaults."""
    return f"dpc: {{bucket: {bucket_ms}, boundary_interval: {bucket_ms}}}\n" if bucket_ms else ""


def _filter_map_spec(name: str, source: str, bucket_ms: int | None = None) -> str:
    return f"""
name: {name}
{_dpc_section(bucket_ms)}streams:
  {source}: {{schema: reading, key: sensor, partitions: 1, topic: {source}}}  # the one pre-loaded input
  {name}_kept: {{schema: reading, key: sensor, partitions: 1}}
  {name}_out: {{schema: reading, key: sensor, partitions: 1}}
operators:
  keep_all:
    type: filter
    input: {source}
    output: {name}_kept
    where: "value > -1000"   # readings stay within [-20, 120]: every tuple passes
  to_fahrenheit:
    type: map
    input: {name}_kept
    output: {name}_out
    fields: {{sensor: sensor, ts: ts, value: "value * 1.8 + 32", seq: seq}}
nodes:
  ingest: {{operators: [keep_all, to_fahrenheit]}}
"""


def _window_spec(name: str, source: str, bucket_ms: int | None = None) -> str:
    return window_spec(name, source, _dpc_section(bucket_ms))


def window_spec(
    name: str, source: str, dpc: str = "", size: int = WINDOW_SIZE_MS, slide: int = WINDOW_SLIDE_MS, engine: str = ""
) -> str:
    """The benches' sliding window per sensor over one pre-loaded input; ``dpc``: the spec's dpc
    section (a line), ``engine``: the node's, if not the default."""
    node = f"{{operators: [per_sensor], engine: {engine}}}" if engine else "{operators: [per_sensor]}"
    return f"""
name: {name}
{dpc}streams:
  {source}: {{schema: reading, key: sensor, partitions: 1, topic: {source}}}  # the one pre-loaded input
  {name}_out: {{schema: window_stat, key: key, partitions: 1}}
operators:
  per_sensor:
    type: window
    input: {source}
    output: {name}_out
    key: sensor
    size: {size}
    slide: {slide}
    aggregates: {{count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  stats: {node}
"""


@dataclass
class Job:
    """One processor run: what the worker process needs to know."""

    kind: str  # "bare" or "node"
    bootstrap: str
    in_topic: str
    out_topic: str
    group: str
    stop_after: int
    idle_s: float
    spec_text: str = ""
    node: str = ""
    profile_out: str = ""
    passthrough: bool = False  # replace SUnion with a union that does not serialize (PassThroughUnion)
    serialize: bool = False  # serialize the one input by buckets, as the paper's SUnion does every input
    window: bool = False  # a peer's job: the window rather than filter+map
    state_dir: str = ""  # a peer's local state


def peers_python() -> Path | None:
    """The Python of the peers' virtualenv (Quix Streams), or None if it is not installed."""
    py = hastream_home() / PEERS_VENV / "bin" / "python"
    return py if py.exists() else None


def is_window(processor: str) -> bool:
    return processor.endswith("window")


def _job(
    processor: str,
    tag: str,
    source: str,
    bootstrap: str,
    stop_after: int,
    idle_s: float,
    bucket_ms: int | None = None,
    passthrough: bool = False,
    serialize: bool = False,
) -> tuple[Job, Spec | None]:
    """A job for ``processor`` reading topic ``source``, with names unique to ``tag``; a node's
    SUnion buckets and boundary interval are ``bucket_ms`` if given, and ``passthrough`` takes
    SUnion's serialization out."""
    if processor in ("bare", "avro"):
        return Job(processor, bootstrap, source, f"{tag}_out", f"bench.{tag}", stop_after, idle_s), None
    if processor in PEERS:
        job = Job("quix", bootstrap, source, f"{tag}_out", f"bench.{tag}", stop_after, idle_s)
        job.window = is_window(processor)
        return job, None
    make = _filter_map_spec if processor == "filter+map" else _window_spec
    text = make(tag, source, bucket_ms)
    spec = parse_spec(text, source=f"<bench {tag}>")
    node = next(iter(spec.nodes))
    out_topic = spec.topic(spec.node_outputs(node)[0], 0)
    job = Job("node", bootstrap, source, out_topic, "", stop_after, idle_s, text, node, passthrough=passthrough)
    job.serialize = serialize
    return job, spec


def _slug(processor: str) -> str:
    """A processor's name as part of a topic name."""
    return processor.replace("+", "").replace(" ", "_")


def _variant(bucket_ms: int | None, passthrough: bool) -> str:
    """A short name for a node variant, for topic names and labels ("" for the defaults)."""
    return ("plain" if passthrough else "") + (f"b{bucket_ms}" if bucket_ms else "")


def _topics_of(job: Job, spec: Spec | None) -> list[TopicSpec]:
    """What ``services.deploy.local.provision`` creates for the spec (its heartbeat, control,
    dead-letter and checkpoint topics too), all with broker append times."""
    if spec is None:
        return [TopicSpec(t, 1, 1, dict(TOPIC_CONFIG)) for t in (job.in_topic, job.out_topic)]
    return topic_specs(spec, 1, TOPIC_CONFIG)


def _is_final(headers: RawHeaders) -> bool:
    """The message is the source's final BOUNDARY (stime 2**62)."""
    try:
        ttype, _, stime, _ = read_headers(headers)
    except HeaderError:
        return False
    return ttype is TupleType.BOUNDARY and stime == FINAL_BOUNDARY


# ---------------------------------------------------------------------------- worker side


def _report(kind: str, **data: Any) -> None:
    print(json.dumps({"ev": kind, **data}), flush=True)


def _run_bare(job: Job, st: Settings) -> dict[str, Any]:
    """The baseline: nothing between consume and produce but the loop itself.

    The raw confluent-kafka clients come from the node's own wrappers, so their configuration
    is always the node's; only the calls in between differ.
    """
    return _run_loop(job, st, None)


def _run_avro(job: Job, st: Settings) -> dict[str, Any]:
    """The bare loop doing the filter+map node's work by hand: decode each reading (a parsed schema),
    filter, map, encode; no headers, no ids, no boundaries (they carry no value and are skipped)."""
    schema = codec_for("reading").schema
    read, write, BytesIO = fastavro.schemaless_reader, fastavro.schemaless_writer, io.BytesIO

    def filter_map(value: bytes) -> bytes | None:
        r: Any = read(BytesIO(value), schema, None)
        if not r["value"] > -1000:
            return None
        buf = BytesIO()
        write(buf, schema, {"sensor": r["sensor"], "ts": r["ts"], "value": r["value"] * 1.8 + 32, "seq": r["seq"]})
        return buf.getvalue()

    return _run_loop(job, st, filter_map)


def _run_loop(job: Job, st: Settings, transform: Callable[[bytes], bytes | None] | None) -> dict[str, Any]:
    """Consume, ``transform`` each value (None: copy the message, headers and all), produce."""
    consumer = BatchConsumer(job.bootstrap, job.group)
    c = consumer.raw
    p = BatchProducer(job.bootstrap, linger_ms=st.linger_ms).raw
    c.assign([TopicPartition(job.in_topic, 0, OFFSET_BEGINNING)])
    _report("ready")
    consumed, first, last, last_report = 0, None, None, 0.0
    idle_since = time.monotonic()
    batch, timeout = st.batch_size, st.poll_timeout_ms / 1000
    # Typed loosely: the messages' fields are never None here, and the loop must not pay for saying so.
    produce: Callable[..., None] = p.produce
    out_topic = job.out_topic
    try:
        while consumed < job.stop_after:
            msgs = consumer.poll_batch(batch, timeout)  # the node's batching, so only the middle differs
            if not msgs:
                if time.monotonic() - idle_since > job.idle_s:
                    break
                continue
            now = time.time()
            idle_since = time.monotonic()
            if first is None:
                first = now
            if transform is None:
                for m in msgs:
                    if m.error() is None:
                        produce(out_topic, m.value(), m.key(), partition=m.partition(), headers=m.headers())
            else:
                for m in msgs:
                    v = m.value()
                    if v is not None and m.error() is None and (out_v := transform(v)) is not None:
                        produce(out_topic, out_v, m.key(), partition=m.partition())
            last = time.time()
            p.flush()
            m = msgs[-1]
            topic, partition, offset = m.topic(), m.partition(), m.offset()
            assert topic is not None and partition is not None and offset is not None
            c.commit(offsets=[TopicPartition(topic, partition, offset + 1)], asynchronous=True)
            consumed += len(msgs)
            if now - last_report > 0.2:
                _report("progress", consumed=consumed)
                last_report = now
            if _is_final(m.headers()):
                break  # the source's last message
    finally:
        p.flush()
        c.close()
    return {"consumed": consumed, "first_at": first, "last_at": last}


class PassThroughUnion(SUnion):
    """The node without SUnion's serialization: every tuple goes to the operators as it arrives,
    as a plain union would, instead of waiting for boundaries to pass its bucket. Boundaries still
    move operator time and are forwarded. Only correct failure-free and with one replica; it is
    the baseline that prices the fault-tolerance operators."""

    def __init__(self, inputs: int, bucket_ms: int, delay_s: float) -> None:
        super().__init__(inputs, bucket_ms, delay_s)
        self._ready: list[STuple] = []

    def push(
        self, port: int, ttype: TupleType, tid: int, stime: int, rec: Any, now: float, tmax: int = NO_TIME
    ) -> None:
        self._ready.append(STuple(ttype, port, tid, stime, rec, tmax))

    def poll(self, now: float) -> list[STuple]:
        out, self._ready = self._ready, []
        return out


def _run_node(job: Job, st: Settings) -> dict[str, Any]:
    """The node under test: the real NodeService.run loop, observed by wrapping three of its calls."""
    from bench.dpc_cost import dpc_scheme
    from services.node.loop import NodeService

    spec = parse_spec(job.spec_text, source="<bench>")
    svc = NodeService(spec, job.node, 0, 0, st)
    scheme = dpc_scheme(svc)
    if job.passthrough:
        scheme.sunion = PassThroughUnion(len(svc.inputs.ports), spec.dpc.bucket, svc.plan.delay_s)
    elif job.serialize:
        scheme.sunion = SUnion(len(svc.inputs.ports), spec.dpc.bucket, svc.plan.delay_s, spec.dpc.failure_policy)
    seen: dict[str, float | None] = {"first_at": None, "last_at": None, "report": 0.0, "state_bytes": 0.0}
    for op in svc.pipeline.holders:  # a Spark window: sample its segments' size after every flush
        _sample_after_flush(op, seen)
    open_inputs, before_batch, outputs = svc.inputs.open, scheme.before_batch, svc.outputs

    def metered_open(
        consumer: BatchConsumer, offsets: dict[str, int] | None, fresh: BatchConsumer | None = None
    ) -> None:
        open_inputs(consumer, offsets, fresh)  # clients are up, input assigned: the node is about to poll
        _report("ready")

    def metered_batch(msgs: list, now: float) -> None:
        t = time.time()
        if msgs and seen["first_at"] is None:
            seen["first_at"] = t
        before_batch(msgs, now)
        if msgs and t - (seen["report"] or 0.0) > 0.2:
            _report("progress", consumed=svc.stats.consumed)
            seen["report"] = t
        final = all(b is not None and b >= FINAL_BOUNDARY for b in scheme.sunion.boundaries)
        if final or svc.stats.consumed >= job.stop_after:
            # The loop ends after this iteration's SUnion poll, produce and flush; the
            # final boundary has made every pending bucket stable.
            svc.running = False

    def metered(write: Callable[[], int]) -> Callable[[], int]:
        """``Outputs.write`` or ``flush``, noting when the last one that sent or waited for output returned."""

        def metered_write() -> int:
            pending = outputs.unacked
            n = write()
            if n or pending:
                seen["last_at"] = time.time()
            return n

        return metered_write

    # Observing the node means replacing four of its methods on these instances.
    svc.inputs.open = metered_open  # type: ignore[method-assign]
    scheme.before_batch = metered_batch  # type: ignore[method-assign]
    outputs.flush = metered(outputs.flush)  # type: ignore[method-assign]
    outputs.write = metered(outputs.write)  # type: ignore[method-assign]
    prof = cProfile.Profile() if job.profile_out else None
    if prof:
        prof.enable()
    stats = svc.run(max_idle_s=job.idle_s, own_process=True)
    if prof:
        prof.disable()
        prof.dump_stats(job.profile_out)
    return {
        "consumed": stats.consumed,
        "produced": stats.produced,
        "deadlettered": stats.deadlettered,
        "tentative": stats.tentative,
        "restart_images": stats.restart_images,
        "pending": len(scheme.sunion.pending),
        "first_at": seen["first_at"],
        "last_at": seen["last_at"],
        "state_bytes_peak": seen["state_bytes"],
    }


def _sample_after_flush(op: Any, seen: dict[str, float | None]) -> None:
    flush, store = op.flush, getattr(op, "store", None)
    if store is None:
        return

    def sampled(progress: Callable[[], None]) -> None:
        before = store.size_bytes()  # the segments before this flush deletes those no window needs
        flush(progress)
        seen["state_bytes"] = max(seen["state_bytes"] or 0.0, float(before), float(store.size_bytes()))

    op.flush = sampled


def worker_main(raw: str) -> None:
    job = Job(**json.loads(raw))
    st = Settings.from_env(job.bootstrap)
    cpu0 = time.process_time()
    run = {"bare": _run_bare, "avro": _run_avro}.get(job.kind, _run_node)
    res = run(job, st)
    res["cpu_s"] = time.process_time() - cpu0
    res.update(_own_and_children_usage())
    _report("done", **res)


def _own_and_children_usage() -> dict[str, float]:
    """Peak memory of this process, and CPU and peak memory of its child processes (a Spark node's JVM)."""
    tick, me = os.sysconf("SC_CLK_TCK"), str(os.getpid())
    child_cpu, child_peak = 0.0, 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[1] != me:  # the parent pid
                continue
            child_cpu += (int(fields[11]) + int(fields[12])) / tick
            child_peak += _peak_rss_mb(stat.parent / "status")
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
    return {
        "rss_peak_mb": _peak_rss_mb(Path("/proc/self/status")),
        "child_cpu_s": child_cpu,
        "child_rss_peak_mb": child_peak,
    }


def _peak_rss_mb(status: Path) -> float:
    for line in status.read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# ---------------------------------------------------------------------------- harness side


class Worker:
    """A processor in its own Python process, reporting JSON lines on stdout."""

    def __init__(self, job: Job, log_dir: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.stderr_path = log_dir / f"{job.out_topic}.stderr"
        self._err = open(self.stderr_path, "w")
        if job.kind == "quix":
            py = peers_python()
            if py is None:
                raise RuntimeError("Quix Streams is not installed: run `make peers`")
            peer = dict(asdict(job), schemas=str(REPO_ROOT / "schemas"), size=WINDOW_SIZE_MS, slide=WINDOW_SLIDE_MS)
            cmd = [str(py), str(REPO_ROOT / "bench" / "quix_app.py"), json.dumps(peer)]
        else:
            cmd = [sys.executable, "-m", "bench.throughput", "--worker", json.dumps(asdict(job))]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            cwd=REPO_ROOT,
            env=env,
        )
        self.ready = threading.Event()
        self.consumed = 0
        self.result: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = ev.pop("ev", None)
            if kind == "ready":
                self.ready.set()
            elif kind == "progress":
                self.consumed = ev["consumed"]
            elif kind == "done":
                self.consumed = ev["consumed"]
                self.result = ev

    def wait(self, timeout: float, on_tick: Callable[[], None] = lambda: None) -> dict[str, Any]:
        """Wait for the worker's result; stop it (by its pid) if it overruns ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            on_tick()
            if time.monotonic() > deadline:
                processes.stop([self.proc], timeout=10)
                break
            time.sleep(0.1)
        self._reader.join(5)
        self._err.close()
        on_tick()
        if self.result is None:
            tail = self.stderr_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(
                f"worker for {self.stderr_path.stem} failed (exit {self.proc.returncode}): " + " | ".join(tail)
            )
        return self.result

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.wait(0)  # raises with the worker's stderr
                raise RuntimeError("worker ended before it was ready")


@dataclass
class OutMsg:
    append_ms: int
    type: str  # the ht header's TYPE
    id: int
    stime: int
    value: bytes | None


def _read_topic(bootstrap: str, topic: str) -> list[OutMsg]:
    """Every message of partition 0 of ``topic``, in log order, with its broker append time and type."""
    c = plain_consumer(bootstrap, "bench.read", unique=True)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        out: list[OutMsg] = []
        if high <= low:
            return out
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 120
        last = -1
        while last < high - 1 and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                if m.error() is not None:
                    continue
                ttype, ts = m.timestamp()
                if ttype != TIMESTAMP_LOG_APPEND_TIME:
                    raise RuntimeError(f"{topic} has timestamp type {ttype}, expected LogAppendTime")
                try:
                    if m.headers() is None:  # a peer's result: a plain record
                        out.append(OutMsg(ts, DATA, -1, -1, m.value()))
                    else:
                        t, tid, stime, _ = read_headers(m.headers())
                        out.append(OutMsg(ts, t.value, tid, stime, m.value()))
                except HeaderError:
                    out.append(OutMsg(ts, "?", -1, -1, m.value()))
                last = m.offset() or 0
        if last < high - 1:
            raise RuntimeError(f"read {topic} only up to offset {last} of {high - 1}")
        return out
    finally:
        c.close()


@dataclass
class OutputCheck:
    """What a run wrote: message counts by tuple type, and whether the stable ids are dense."""

    types: dict[str, int] = field(default_factory=dict)
    stable: int = 0
    dense: bool = True
    last_append_ms: int | None = None

    @property
    def not_results(self) -> int:
        return sum(self.types.get(t, 0) for t in NOT_RESULTS)


def _check_output(label: str, msgs: list[OutMsg], deadlettered: int = 0) -> OutputCheck:
    """Count the output by type; fail on anything a failure-free run must not write.

    Results are the STABLE data tuples (ids 0, 1, 2, ... in log order); BOUNDARY tuples are
    control. A TENTATIVE tuple (and the UNDO/REC_DONE that would follow) means SUnion gave up
    waiting for a boundary: the input lacked boundaries, and the figures would be wrong.
    """
    types = Counter(m.type for m in msgs)
    ids = [m.id for m in msgs if m.type == "STABLE"]
    results = len(ids) + types.get(DATA, 0)
    chk = OutputCheck(dict(types), results, ids == list(range(len(ids))), msgs[-1].append_ms if msgs else None)
    problems = []
    if chk.not_results:
        problems.append(", ".join(f"{types[t]} {t}" for t in NOT_RESULTS if types.get(t)))
    if not chk.dense:
        problems.append("STABLE ids are not 0, 1, 2, ... in order")
    if deadlettered:
        problems.append(f"{deadlettered} input messages dead-lettered")
    if problems:
        raise RuntimeError(
            f"{label}: output not failure-free ({'; '.join(problems)}): were the input's boundaries missing?"
        )
    return chk


def _pct(sorted_vals: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1, int(round(q / 100 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


def _warm_up(bootstrap: str, topic: str) -> None:
    """One idempotent produce before measuring, so the broker's producer-id coordinator has loaded.

    Right after a broker starts, the first idempotent producer is told "coordinator load in
    progress" and librdkafka logs it; this producer's log goes nowhere.
    """
    quiet = logging.getLogger("bench.warmup")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    ensure_topics(bootstrap, [TopicSpec(topic, 1, 1, dict(TOPIC_CONFIG))])
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "logger": quiet})
    p.produce(topic, b"warm-up")
    p.flush(60)


def _reading_records(n: int, rng_seed: int = 7, wall_clock: bool = False) -> Iterator[dict[str, Any]]:
    return readings(n, sensors=SENSORS, seed=rng_seed, wall_clock=wall_clock)


def summarize_runs(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated ``Bench.throughput_run`` results of one processor: medians, and each run's figures."""
    cpu = [r["cpu_s"] / r["consumed"] * 1e6 for r in rs]
    return {
        "tuples_per_s": statistics.median(r["tuples_per_s"] for r in rs),
        "runs_tuples_per_s": [round(r["tuples_per_s"]) for r in rs],
        "consumed": rs[0]["consumed"],
        "messages_consumed": rs[0]["messages_consumed"],
        "output": rs[0]["output"],
        "output_types": rs[0]["output_types"],
        "cpu_s_per_mtuple": statistics.median(cpu),
        "runs_cpu_s_per_mtuple": [round(c, 1) for c in cpu],
    }


class Tasks(Protocol):
    """Where a ``Bench`` reports progress: a rich ``Progress``, or anything with its two calls."""

    def add_task(self, description: str, *, total: float | None = ...) -> Any: ...

    def update(self, task_id: Any, /, *, completed: float | None = ...) -> None: ...


class Bench:
    """One benchmark run: a broker, the pre-loaded input, the runs and the figures."""

    def __init__(self, args: argparse.Namespace, bootstrap: str, log_dir: Path) -> None:
        self.args, self.bootstrap, self.log_dir = args, bootstrap, log_dir
        self.tag = "b" + uuid.uuid4().hex[:6]
        self.created: list[str] = []
        self.input_boundaries = 0
        self.settings = Settings.from_env(bootstrap)
        _warm_up(bootstrap, f"{self.tag}_warmup")
        self.created.append(f"{self.tag}_warmup")

    def _provision(self, topics: list[TopicSpec]) -> None:
        ensure_topics(self.bootstrap, topics)
        self.created += [t.name for t in topics]

    # -- phase 1: throughput on a pre-loaded input ----------------------------------

    def preload(self, progress: Tasks) -> tuple[str, int]:
        """Write the throughput input, with boundaries as a DPC source sends them; returns the
        topic and its message count (data tuples plus boundaries)."""
        n = self.args.tuples
        source = f"{self.tag}_in"
        _, spec = _job("filter+map", f"{self.tag}_src", source, self.bootstrap, 0, 0)
        assert spec is not None
        self._provision([TopicSpec(source, 1, 1, dict(TOPIC_CONFIG))])
        writer = SourceWriter(spec, source, self.bootstrap)
        task = progress.add_task(f"pre-loading {n:,} tuples", total=n)
        # As fast as it goes, a boundary every dpc.boundary_interval of wall clock, the final one at 2**62.
        pump(
            writer,
            _reading_records(n),
            progress=lambda i: progress.update(task, completed=i),
            wait_release=False,
            final_boundary=FINAL_BOUNDARY,
        )
        self.input_boundaries = writer.boundaries
        del writer
        gc.collect()  # free the producer now: one still alive when the broker stops logs disconnects
        progress.update(task, completed=n)
        return source, n + self.input_boundaries

    def throughput_run(
        self,
        processor: str,
        source: str,
        messages: int,
        i: int,
        progress: Tasks,
        profile_out: str = "",
        bucket_ms: int | None = None,
        passthrough: bool = False,
        serialize: bool = False,
    ) -> dict[str, Any]:
        n = self.args.tuples
        variant = _variant(bucket_ms, passthrough)
        tag = f"{self.tag}_{_slug(processor)}{variant}{i}"
        job, spec = _job(processor, tag, source, self.bootstrap, messages, 30, bucket_ms, passthrough, serialize)
        job.profile_out, job.state_dir = profile_out, str(self.log_dir / tag)
        self._provision(_topics_of(job, spec))
        label = f"{processor}{variant and ' ' + variant} run {i + 1}" + (" (profiled)" if profile_out else "")
        task = progress.add_task(label, total=messages)
        w = Worker(job, self.log_dir)
        res = w.wait(timeout=60 + n / 1000, on_tick=lambda: progress.update(task, completed=w.consumed))
        if res["consumed"] != messages:
            raise RuntimeError(f"{label}: consumed {res['consumed']} of the input's {messages} messages")
        chk = _check_output(label, _read_topic(self.bootstrap, job.out_topic), res.get("deadlettered", 0))
        end = max(res["last_at"], (chk.last_append_ms or 0) / 1000)
        secs = end - res["first_at"]
        return {
            "tuples_per_s": n / secs,
            "seconds": secs,
            "consumed": n,
            "messages_consumed": res["consumed"],
            "output": chk.stable,
            "output_types": chk.types,
            "cpu_s": res["cpu_s"],
            "restart_images": res.get("restart_images"),
            "out_topic": job.out_topic,
        }

    # -- phase 2: latency at a fixed input rate ------------------------------------

    def paced_run(
        self,
        processor: str,
        progress: Tasks,
        bucket_ms: int | None = None,
        passthrough: bool = False,
        serialize: bool = False,
    ) -> dict[str, Any]:
        rate, secs = self.args.rate, self.args.paced_seconds
        total = int(rate * secs)
        tag = f"{self.tag}_p{_slug(processor)}{_variant(bucket_ms, passthrough)}"
        source = f"{tag}_in"
        # stop_after is only a safety net: the worker stops at the final boundary.
        job, spec = _job(
            processor, tag, source, self.bootstrap, 10 * total + 1000, 30, bucket_ms, passthrough, serialize
        )
        job.state_dir = str(self.log_dir / tag)
        writer_spec = spec or _job("filter+map", f"{tag}_src", source, self.bootstrap, 0, 0)[1]
        assert writer_spec is not None
        self._provision(_topics_of(job, spec))
        writer = SourceWriter(writer_spec, source, self.bootstrap)
        task = progress.add_task(f"{processor} at {rate:,.0f}/s", total=total)
        w = Worker(job, self.log_dir)
        w.wait_ready()
        time.sleep(0.5)  # let the consumer's first fetch start before the clock does
        # A live source: event time = generation time (the wall clock), a boundary every
        # dpc.boundary_interval (the promise a live source keeps), the final one at 2**62.
        sent = pump(
            writer,
            _reading_records(total, rng_seed=11, wall_clock=True),
            rate,
            progress=lambda i: progress.update(task, completed=i),
            wait_release=False,
            final_boundary=FINAL_BOUNDARY,
        )
        del writer
        gc.collect()
        res = w.wait(timeout=60, on_tick=lambda: progress.update(task, completed=sent))
        label = f"{processor} at {rate:,.0f}/s"
        outs = _read_topic(self.bootstrap, job.out_topic)
        chk = _check_output(label, outs, res.get("deadlettered", 0))
        lat = self._latencies(processor, source, outs, writer_spec.dpc.bucket)
        lat["output_types"] = chk.types
        return lat

    def _latencies(self, processor: str, source: str, outs: list[OutMsg], bucket_ms: int) -> dict[str, Any]:
        reading = codec_for("reading")
        ins_all = _read_topic(self.bootstrap, source)
        ins = [m for m in ins_all if m.type == "STABLE"]
        outs = [m for m in outs if m.type in RESULTS_TYPES]  # results only; boundaries are control
        if not ins:
            raise RuntimeError(f"no input in {source}")
        start = ins[0].append_ms + WARMUP_S * 1000
        # Tuples whose SUnion bucket ends after the last periodic boundary were released by the
        # final one, right after the last tuple, without the usual wait: not counted.
        last_b = max((m.stime for m in ins_all if m.type == "BOUNDARY" and m.stime < FINAL_BOUNDARY), default=0)

        def counted(m: OutMsg) -> bool:
            return m.append_ms >= start and (m.stime // bucket_ms + 1) * bucket_ms <= last_b

        lat: list[float] = []
        if is_window(processor):
            stat = codec_for("window_stat")
            in_ts = [m.stime for m in ins]  # stime is the record's ts
            for m in outs:
                end = stat.decode(m.value)["window_end"]
                k = bisect.bisect_left(in_ts, end)
                if k < len(ins) and counted(ins[k]):
                    lat.append(m.append_ms - ins[k].append_ms)
        else:
            in_by_seq = {reading.decode(m.value)["seq"]: m for m in ins}
            for m in outs:
                t_in = in_by_seq.get(reading.decode(m.value)["seq"])
                if t_in is not None and counted(t_in):
                    lat.append(m.append_ms - t_in.append_ms)
        lat.sort()
        return {
            "p50_ms": _pct(lat, 50),
            "p99_ms": _pct(lat, 99),
            "max_ms": lat[-1] if lat else float("nan"),
            "mean_ms": statistics.fmean(lat) if lat else float("nan"),
            "samples": len(lat),
            "input": len(ins),
            "input_boundaries": len(ins_all) - len(ins),
            "output": len(outs),
        }

    # -- phase 3: CPU cost of SUnion and SOutput, in process ------------------------

    def dpc_cost(self, progress: Tasks) -> dict[str, dict[str, Any]]:
        from bench.dpc_cost import measure

        task = progress.add_task("DPC cost (in process)", total=2)
        records = list(_reading_records(min(self.args.tuples, 200_000)))
        cost = {}
        for i, p in enumerate(("filter+map", "window")):
            spec = _job(p, f"{self.tag}_cost", "cost_in", self.bootstrap, 0, 0)[1]
            assert spec is not None
            cost[p] = measure(spec, next(iter(spec.nodes)), records, batch=self.settings.batch_size)
            progress.update(task, completed=i + 1)
        return cost

    def cleanup(self) -> None:
        if self.created:
            delete_topics(self.bootstrap, sorted(set(self.created)))


def _machine(bootstrap_external: bool) -> dict[str, Any]:
    from infra.kafka.cluster import KAFKA_VERSION

    return machine(
        {
            "kafka": "external broker (version not probed)" if bootstrap_external else KAFKA_VERSION,
            "broker": "external (--bootstrap)" if bootstrap_external else "embedded 1-broker KRaft",
        }
    )


def check_goals(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each goal with the figure measured and whether it was met (those whose baseline was not run are left out)."""
    goals: list[dict[str, Any]] = []

    def goal(name: str, value: float, want: str, met: bool) -> None:
        goals.append({"goal": name, "measured": round(value, 2), "want": want, "met": met})

    fm = results["filter+map"]
    goal("filter+map tuples/s × Avro loop", fm["x_avro"], f">= {MIN_X_AVRO}", fm["x_avro"] >= MIN_X_AVRO)
    for p in ("filter+map", "window"):
        r, quix = results[p], results.get(f"quix {p}")
        if quix is None:
            continue
        goal(f"{p} tuples/s × Quix", r["x_quix"], f">= {MIN_X_QUIX}", r["x_quix"] >= MIN_X_QUIX)
        if r["latency"] and quix["latency"]:
            over = r["latency"]["p50_ms"] - quix["latency"]["p50_ms"]
            goal(f"{p} p50 ms over Quix's", over, f"<= {P50_OVER_QUIX_MS[p]}", over <= P50_OVER_QUIX_MS[p])
    if fm["latency"]:
        p99 = fm["latency"]["p99_ms"]
        goal("filter+map p99 ms", p99, f"< {MAX_P99_MS}", p99 < MAX_P99_MS)
    return goals


def compare_outputs(bootstrap: str, topics: dict[str, str]) -> dict[str, Any]:
    """Decode the results each processor wrote and check they are the hastream nodes' own: the Avro
    loop's and Quix's filter+map record for record, Quix's windows each equal to hastream's (Quix
    leaves the windows of the last event times open, having no end-of-input; hastream's final
    boundary closes them). Raises on any difference, so no figure is quoted for unequal work."""

    def results(p: str, schema: str) -> list[dict[str, Any]]:
        codec = codec_for(schema)
        return [codec.decode(m.value) for m in _read_topic(bootstrap, topics[p]) if m.type in RESULTS_TYPES]

    fm = results("filter+map", "reading")
    done: dict[str, Any] = {"filter+map": {"records": len(fm), "equal": []}}
    for p in ("avro", "quix filter+map"):
        if p in topics:
            got = results(p, "reading")
            if got != fm:
                at = next((i for i, (a, b) in enumerate(zip(got, fm, strict=False)) if a != b), min(len(got), len(fm)))
                raise RuntimeError(f"{p}: {len(got)} results differ from the filter+map node's {len(fm)} at #{at}")
            done["filter+map"]["equal"].append(p)
    if "quix window" in topics:
        want = {(r["key"], r["window_start"]): r for r in results("window", "window_stat")}
        got = results("quix window", "window_stat")
        for r in got:
            w = want.get((r["key"], r["window_start"]))
            if w is None or not _same_window(r, w):
                raise RuntimeError(f"quix window: {r} is not the window node's {w}")
        last_end = max(w["window_end"] for w in want.values())
        open_at_end = [k for k in want.keys() - {(r["key"], r["window_start"]) for r in got}]
        if any(want[k]["window_end"] <= last_end - 2 * WINDOW_SIZE_MS for k in open_at_end):
            raise RuntimeError("quix window: windows missing before the input's last event times")
        done["window"] = {"records": len(want), "equal": ["quix window"], "quix_open_at_end": len(open_at_end)}
    return done


def _same_window(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        a["window_end"] == b["window_end"]
        and a["count"] == b["count"]
        and all(math.isclose(a[f], b[f], rel_tol=1e-9, abs_tol=1e-9) for f in ("sum", "avg", "min", "max"))
    )


def _table(results: dict[str, dict[str, Any]], goals: list[dict[str, Any]]) -> Table:
    t = Table(title="throughput and latency (1 partition, 1 process each)", caption_justify="left")
    t.add_column("processor", no_wrap=True)
    for col in ("tuples/s", "× bare", "× Avro loop", "× Quix", "out/in", "CPU µs/tuple", "p50 ms", "p99 ms"):
        t.add_column(col, justify="right", no_wrap=True)

    def ms(v: float | None) -> str:
        return "–" if v is None or v != v else f"{v:.1f}"

    for name, r in results.items():
        lat = r.get("latency") or {}
        t.add_row(
            name,
            f"{r['tuples_per_s']:,.0f}",
            f"{r['ratio']:.2f}",
            f"{r['x_avro']:.2f}",
            f"{r['x_quix']:.1f}" if "x_quix" in r else "–",
            f"{r['output'] / max(1, r['consumed']):.2f}",
            f"{r['cpu_s_per_mtuple']:.1f}",
            ms(lat.get("p50_ms")),
            ms(lat.get("p99_ms")),
        )
    t.caption = "\n".join(
        f"goal {g['goal']}: {g['measured']} (want {g['want']}) " + ("[green]met[/]" if g["met"] else "[red]not met[/]")
        for g in goals
    )
    return t


def _dpc_table(cost: dict[str, dict[str, Any]], results: dict[str, dict[str, Any]]) -> Table:
    t = Table(
        title="DPC in the failure-free case: CPU per input tuple, in process (bench/dpc_cost.py)",
        caption_justify="left",
    )
    t.add_column("node", no_wrap=True)
    for col in ("operators µs", "SUnion µs", "SOutput µs", "node step µs", "DPC overhead µs", "of node CPU"):
        t.add_column(col, justify="right", no_wrap=True)
    for name, c in cost.items():
        node_cpu = results[name]["cpu_s_per_mtuple"]
        t.add_row(
            name,
            f"{c['operators_us']:.2f}",
            f"{c['sunion_us']:.2f}",
            f"{c['soutput_us']:.2f}",
            f"{c['node_step_us']:.2f}",
            f"{c['dpc_overhead_us']:.2f}",
            f"{c['dpc_overhead_us'] / node_cpu:.0%}",
        )
    t.caption = (
        "node step = SUnion push/boundary/poll + operators + SOutput + advance, as NodeService runs them; "
        "DPC overhead = node step - operators; 'of node CPU' relates it to the Kafka run's CPU µs/tuple"
    )
    return t


def _print_profile(path: Path, top: int = 22) -> None:
    st = pstats.Stats(str(path))
    st.sort_stats("tottime")
    total = st.total_tt  # type: ignore[attr-defined]
    t = Table(title=f"filter+map node profile (cProfile, by own time; total {total:.2f}s)")
    for col in ("function", "calls", "own s", "own %", "cum s"):
        t.add_column(col, justify="left" if col == "function" else "right")
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in rows:
        where = f"{Path(file).name}:{line}" if line else file
        t.add_row(f"{fn} ({where})", f"{nc:,}", f"{tt:.3f}", f"{100 * tt / total:.1f}", f"{ct:.3f}")
    out.print(t)


def progress_bars() -> Progress:
    """The benchmarks' progress display: one bar per run, with counts and elapsed time."""
    cols = (
        SpinnerColumn(),
        TextColumn("{task.description:<26}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    return Progress(*cols, console=console)


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="hastream-bench-"))
    cluster = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            from infra.kafka.cluster import KafkaCluster

            with console.status("starting a 1-broker Kafka cluster"):
                t0 = time.monotonic()
                cluster = KafkaCluster(brokers=1, data_dir=tmp / "kafka").start()
                bootstrap = cluster.bootstrap
            console.print(f"broker up at {bootstrap} in {time.monotonic() - t0:.1f}s")
        bench = Bench(args, bootstrap, tmp)
        processors = [p for p in PROCESSORS if p not in PEERS or peers_python() is not None]
        if len(processors) < len(PROCESSORS):
            console.print("[yellow]Quix Streams is not installed: its rows are skipped (`make peers` installs it)[/]")
        runs: dict[str, list[dict[str, Any]]] = {p: [] for p in processors}
        latency: dict[str, dict[str, Any]] = {}
        try:
            with progress_bars() as progress:
                source, messages = bench.preload(progress)
                for i in range(args.repeat):
                    for p in processors:
                        runs[p].append(bench.throughput_run(p, source, messages, i, progress))
                with console.status("checking that every processor computed the same results"):
                    equal = compare_outputs(bootstrap, {p: rs[0]["out_topic"] for p, rs in runs.items()})
                for p in processors:
                    latency[p] = bench.paced_run(p, progress)
                if args.profile:
                    PROFILE_OUT.parent.mkdir(parents=True, exist_ok=True)
                    bench.throughput_run(
                        "filter+map", source, messages, args.repeat, progress, profile_out=str(PROFILE_OUT)
                    )
                dpc_cost = bench.dpc_cost(progress)
        finally:
            if cluster is None:
                bench.cleanup()
        results: dict[str, dict[str, Any]] = {}
        for p in processors:
            rs = runs[p]
            results[p] = {**summarize_runs(rs), "latency": latency.get(p)}
            if p in ("filter+map", "window"):
                results[p]["restart_images_per_run"] = [r["restart_images"] for r in rs]
        base = results["bare"]
        for r in results.values():
            r["ratio"] = r["tuples_per_s"] / base["tuples_per_s"]
            r["x_avro"] = r["tuples_per_s"] / results["avro"]["tuples_per_s"]
        for p in ("filter+map", "window"):
            if f"quix {p}" in results:
                results[p]["x_quix"] = results[p]["tuples_per_s"] / results[f"quix {p}"]["tuples_per_s"]
        goals = check_goals(results)
        out.print(_table(results, goals))
        out.print(_dpc_table(dpc_cost, results))
        if args.profile:
            _print_profile(PROFILE_OUT)
        st = bench.settings
        cfg_spec = _job("filter+map", "cfg", "cfg_in", bootstrap, 0, 0)[1]
        assert cfg_spec is not None
        dpc = cfg_spec.dpc
        doc = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": _machine(bool(args.bootstrap)),
            "config": {
                "tuples": args.tuples,
                "repeat": args.repeat,
                "quick": args.quick,
                "paced_rate": args.rate,
                "paced_seconds": args.paced_seconds,
                "warmup_s": WARMUP_S,
                "partitions": 1,
                "sensors": SENSORS,
                "window": {"size_ms": WINDOW_SIZE_MS, "slide_ms": WINDOW_SLIDE_MS},
                "batch_size": st.batch_size,
                "poll_timeout_ms": st.poll_timeout_ms,
                "linger_ms": st.linger_ms,
                "input_boundaries": bench.input_boundaries,
                "final_boundary_stime": FINAL_BOUNDARY,
                "dpc": {
                    "bucket_ms": dpc.bucket,
                    "boundary_interval_ms": dpc.boundary_interval,
                    "restart_image_interval_ms": dpc.restart_image_interval,
                    "delay_ms": dpc.delay,
                    "alpha": dpc.alpha,
                    "heartbeat_interval_ms": dpc.heartbeat_interval,
                    "replicas": 1,
                },
            },
            "definitions": {
                "timestamps": "broker LogAppendTime on every topic",
                "tuples_per_s": "input data tuples / (end of last batch - receipt of first batch); median of runs",
                "avro": "bare loop that decodes each reading (parsed schema), filters, maps and encodes it",
                "quix": "Quix Streams application with the same filter+map and hopping window (bench/quix_app.py)",
                "equal_outputs": "the results of run 1 of every processor, decoded and compared before any figure",
                "output": "STABLE data tuples in the output topic (ids checked dense); a TENTATIVE, UNDO or REC_DONE "
                "tuple fails the benchmark; BOUNDARY tuples are control, counted in output_types only",
                "cpu_s_per_mtuple": "worker process CPU time (all threads) per input data tuple, in µs; median of runs",
                "latency": "output append time - append time of the input it came from (window: the input that "
                "closed the window); paced phase, first second and inputs released by the final "
                "boundary excluded",
                "dpc_cost": "in-process CPU µs per input tuple: operators alone vs SUnion -> operators -> SOutput "
                "as NodeService runs them (bench/dpc_cost.py); best of 3",
            },
            "goals": goals,
            "equal_outputs": equal,
            "results": results,
            "dpc_cost": dpc_cost,
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
        plot(doc, PLOT)
        out.print(f"figures written to {RESULTS.relative_to(REPO_ROOT)}, plot to {PLOT.relative_to(REPO_ROOT)}")
        return doc
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--tuples",
        type=int,
        default=None,
        help="pre-loaded input tuples per throughput run (default 300000, --quick 100000)",
    )
    ap.add_argument("--quick", action="store_true", help="small run (about a minute including broker start)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="throughput runs per processor; the median counts (default 3, --quick 1)",
    )
    ap.add_argument("--rate", type=float, default=1000, help="input tuples/s of the latency phase")
    ap.add_argument(
        "--paced-seconds", type=float, default=None, help="length of each latency run (default 15, --quick 6)"
    )
    ap.add_argument("--bootstrap", help="use this broker instead of starting one")
    ap.add_argument(
        "--profile", action="store_true", help=f"also profile one filter+map run (cProfile, {PROFILE_OUT.name})"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.tuples = a.tuples or (100_000 if a.quick else 300_000)
    a.repeat = a.repeat or (1 if a.quick else 3)
    a.paced_seconds = a.paced_seconds or (6.0 if a.quick else 15.0)
    return a


def plot(doc: dict[str, Any], path: Path) -> None:
    """Throughput and latency of each processor beside the bare loop, with the workload stated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = doc["results"]
    names = list(res)
    colours = ["#888888" if n in ("bare", "avro") else "#e08a2c" if n in PEERS else "#2a7ab9" for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.6))
    tps = [res[n]["tuples_per_s"] / 1000 for n in names]
    bars = a.bar(names, tps, color=colours)
    for bar, n in zip(bars, names, strict=True):
        a.annotate(
            f"{res[n]['tuples_per_s'] / 1000:.1f}k\n{res[n]['ratio']:.2f}x",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    a.tick_params(axis="x", labelrotation=20)
    a.set_ylabel("input tuples/s (thousands)")
    a.set_title("throughput, pre-loaded input")
    a.set_ylim(0, max(tps) * 1.25)
    lat = [n for n in names if res[n].get("latency")]
    x = range(len(lat))
    for off, q, colour in ((-0.2, "p50", "#2a7ab9"), (0.2, "p99", "#7fb3d9")):
        vals = [res[n]["latency"][f"{q}_ms"] for n in lat]
        for bar, v in zip(b.bar([i + off for i in x], vals, width=0.4, label=q, color=colour), vals, strict=True):
            b.annotate(
                f"{v:.0f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8
            )
    b.set_xticks(list(x), lat, rotation=20)
    b.set_ylabel("end-to-end latency (ms)")
    b.set_title(f"latency at {doc['config']['paced_rate']:,} tuples/s")
    b.set_ylim(0, max(res[n]["latency"]["p99_ms"] for n in lat) * 1.35)
    b.legend(loc="upper left", ncols=2)
    m, c = doc["machine"], doc["config"]
    d = c.get("dpc", {})
    fig.suptitle(
        f"hastream nodes (blue; DPC, failure-free, bucket {d.get('bucket_ms')} ms) vs bare confluent-kafka "
        f"loops (grey: bytes only, and Avro filter+map by hand) and Quix Streams (orange)\n"
        f"{c['tuples']:,} reading tuples, 1 partition, batch {c['batch_size']}; "
        f"{m['cores']} cores, Python {m['python']}, Kafka {m['kafka']} ({m['broker']})",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return
    run(args)


if __name__ == "__main__":
    main()
