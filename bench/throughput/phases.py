"""``Bench``: one benchmark run's broker-side work, phase by phase: the pre-loaded input and the
throughput runs (phase 1), the paced runs and their latencies (phase 2), and the in-process DPC
cost (phase 3)."""

from __future__ import annotations

import argparse
import bisect
import gc
import logging
import statistics
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Protocol

from confluent_kafka import Producer

from bench.stats import pct
from bench.throughput.check import RESULTS_TYPES, OutMsg, check_output, read_topic
from bench.throughput.jobs import (
    FINAL_BOUNDARY,
    TOPIC_CONFIG,
    is_window,
    make_job,
    slug,
    topics_of,
    variant_name,
)
from bench.throughput.worker import Worker
from bench.workload import reading_records
from services.client.pump import pump
from services.client.source import SourceWriter
from services.core.admin import TopicSpec, delete_topics, ensure_topics
from services.core.codec import codec_for
from services.core.config import Settings

WARMUP_S = 1.0


class Tasks(Protocol):
    """Where a ``Bench`` reports progress: a rich ``Progress``, or anything with its two calls."""

    def add_task(self, description: str, *, total: float | None = ...) -> Any: ...

    def update(self, task_id: Any, /, *, completed: float | None = ...) -> None: ...


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


def live_source(writer: SourceWriter, total: int, rate: float, progress: Callable[[int], None]) -> int:
    """``total`` readings at ``rate`` as a live source writes them: event time = generation time (the
    wall clock), a boundary every dpc.boundary_interval (the promise a live source keeps), the final
    one at 2**62; returns how many were sent."""
    return pump(
        writer,
        reading_records(total, rng_seed=11, wall_clock=True),
        rate,
        progress=progress,
        wait_release=False,
        final_boundary=FINAL_BOUNDARY,
    )


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

    def provision(self, topics: list[TopicSpec]) -> None:
        ensure_topics(self.bootstrap, topics)
        self.created += [t.name for t in topics]

    # -- phase 1: throughput on a pre-loaded input ----------------------------------

    def preload(self, progress: Tasks) -> tuple[str, int]:
        """Write the throughput input, with boundaries as a DPC source sends them; returns the
        topic and its message count (data tuples plus boundaries)."""
        n = self.args.tuples
        source = f"{self.tag}_in"
        _, spec = make_job("filter+map", f"{self.tag}_src", source, self.bootstrap, 0, 0)
        assert spec is not None
        self.provision([TopicSpec(source, 1, 1, dict(TOPIC_CONFIG))])
        writer = SourceWriter(spec, source, self.bootstrap)
        task = progress.add_task(f"pre-loading {n:,} tuples", total=n)
        # As fast as it goes, a boundary every dpc.boundary_interval of wall clock, the final one at 2**62.
        pump(
            writer,
            reading_records(n),
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
        variant = variant_name(bucket_ms, passthrough)
        tag = f"{self.tag}_{slug(processor)}{variant}{i}"
        job, spec = make_job(processor, tag, source, self.bootstrap, messages, 30, bucket_ms, passthrough, serialize)
        job.profile_out, job.state_dir = profile_out, str(self.log_dir / tag)
        self.provision(topics_of(job, spec))
        label = f"{processor}{variant and ' ' + variant} run {i + 1}" + (" (profiled)" if profile_out else "")
        task = progress.add_task(label, total=messages)
        w = Worker(job, self.log_dir)
        res = w.wait(timeout=60 + n / 1000, on_tick=lambda: progress.update(task, completed=w.consumed))
        if res["consumed"] != messages:
            raise RuntimeError(f"{label}: consumed {res['consumed']} of the input's {messages} messages")
        chk = check_output(label, read_topic(self.bootstrap, job.out_topic), res.get("deadlettered", 0))
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
        tag = f"{self.tag}_p{slug(processor)}{variant_name(bucket_ms, passthrough)}"
        source = f"{tag}_in"
        # stop_after is only a safety net: the worker stops at the final boundary.
        job, spec = make_job(
            processor, tag, source, self.bootstrap, 10 * total + 1000, 30, bucket_ms, passthrough, serialize
        )
        job.state_dir = str(self.log_dir / tag)
        writer_spec = spec or make_job("filter+map", f"{tag}_src", source, self.bootstrap, 0, 0)[1]
        assert writer_spec is not None
        self.provision(topics_of(job, spec))
        writer = SourceWriter(writer_spec, source, self.bootstrap)
        task = progress.add_task(f"{processor} at {rate:,.0f}/s", total=total)
        w = Worker(job, self.log_dir)
        w.wait_ready()
        time.sleep(0.5)  # let the consumer's first fetch start before the clock does
        sent = live_source(writer, total, rate, lambda i: progress.update(task, completed=i))
        del writer
        gc.collect()
        res = w.wait(timeout=60, on_tick=lambda: progress.update(task, completed=sent))
        label = f"{processor} at {rate:,.0f}/s"
        outs = read_topic(self.bootstrap, job.out_topic)
        chk = check_output(label, outs, res.get("deadlettered", 0))
        lat = self.latencies(processor, source, outs, writer_spec.dpc.bucket)
        lat["output_types"] = chk.types
        return lat

    def latencies(self, processor: str, source: str, outs: list[OutMsg], bucket_ms: int) -> dict[str, Any]:
        reading = codec_for("reading")
        ins_all = read_topic(self.bootstrap, source)
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
            "p50_ms": pct(lat, 50),
            "p99_ms": pct(lat, 99),
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
        records = list(reading_records(min(self.args.tuples, 200_000)))
        cost = {}
        for i, p in enumerate(("filter+map", "window")):
            spec = make_job(p, f"{self.tag}_cost", "cost_in", self.bootstrap, 0, 0)[1]
            assert spec is not None
            cost[p] = measure(spec, next(iter(spec.nodes)), records, batch=self.settings.batch_size)
            progress.update(task, completed=i + 1)
        return cost

    def cleanup(self) -> None:
        if self.created:
            delete_topics(self.bootstrap, sorted(set(self.created)))
