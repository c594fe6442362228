"""The processors under test, as a worker process runs them: the bare and the Avro loop, and the
hastream node (the real ``NodeService.run`` loop, observed), with or without SUnion's serialization."""

from __future__ import annotations

import cProfile
import io
import time
from typing import TYPE_CHECKING, Any, Callable

import fastavro
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from bench.throughput.jobs import FINAL_BOUNDARY, Job, report
from services.core.codec import codec_for
from services.core.config import Settings
from services.core.errors import HeaderError
from services.core.kafka import BatchConsumer, BatchProducer
from services.core.tuples import NO_TIME, RawHeaders, TupleType, read_headers
from services.dpc.buckets import STuple
from services.dpc.sunion import SUnion
from services.spec import Spec, parse_spec

if TYPE_CHECKING:
    from services.dpc.scheme import DpcScheme
    from services.node.loop import NodeService
    from services.node.merge import Admitted
    from services.node.scheme import NodeStats


def _is_final(headers: RawHeaders) -> bool:
    """The message is the source's final BOUNDARY (stime 2**62)."""
    try:
        ttype, _, stime, _ = read_headers(headers)
    except HeaderError:
        return False
    return ttype is TupleType.BOUNDARY and stime == FINAL_BOUNDARY


def run_bare(job: Job, st: Settings) -> dict[str, Any]:
    """The baseline: nothing between consume and produce but the loop itself.

    The raw confluent-kafka clients come from the node's own wrappers, so their configuration
    is always the node's; only the calls in between differ.
    """
    return _run_loop(job, st, None)


def run_avro(job: Job, st: Settings) -> dict[str, Any]:
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
    report("ready")
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
                report("progress", consumed=consumed)
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
        self,
        port: int,
        ttype: TupleType,
        tid: int,
        stime: int,
        rec: Any,
        now: float,
        tmax: int = NO_TIME,
        offset: int = -1,
    ) -> None:
        self._ready.append(STuple(ttype, port, tid, stime, rec, tmax, offset))

    def poll(self, now: float) -> list[STuple]:
        out, self._ready = self._ready, []
        return out


def run_node(job: Job, st: Settings) -> dict[str, Any]:
    """The node under test: the real NodeService.run loop, observed by wrapping three of its calls."""
    from services.node.loop import NodeService
    from services.schemes import build_scheme

    spec = parse_spec(job.spec_text, source="<bench>")
    svc = NodeService(spec, job.node, 0, 0, st, build_scheme)
    scheme = _scheme(svc, spec, job)
    seen: dict[str, float | None] = {"first_at": None, "last_at": None, "report": 0.0, "state_bytes": 0.0}
    for op in svc.pipeline.holders:  # a Spark window: sample its segments' size after every flush
        _sample_after_flush(op, seen)
    _observe(svc, scheme, job, seen)
    stats = _run_profiled(svc, job)
    return {
        "consumed": stats.consumed,
        "produced": stats.produced,
        "deadlettered": stats.deadlettered,
        "tentative": stats.tentative,
        "restart_images": stats.restart_images,
        "pending": len(scheme.path.sunion.pending),
        "first_at": seen["first_at"],
        "last_at": seen["last_at"],
        "state_bytes_peak": seen["state_bytes"],
    }


def _scheme(svc: NodeService, spec: Spec, job: Job) -> DpcScheme:
    """The node's DPC scheme, its SUnion replaced if the job takes out or forces serialization."""
    from bench.dpc_cost import dpc_scheme

    scheme = dpc_scheme(svc)
    if job.passthrough:
        scheme.path.sunion = PassThroughUnion(len(svc.inputs.ports), spec.dpc.bucket, svc.plan.delay_s)
    elif job.serialize:
        scheme.path.sunion = SUnion(len(svc.inputs.ports), spec.dpc.bucket, svc.plan.delay_s, spec.dpc.failure_policy)
    return scheme


def _observe(svc: NodeService, scheme: DpcScheme, job: Job, seen: dict[str, float | None]) -> None:
    """Wrap the node's input opening, intake and output writes: they report "ready" and
    progress, note the first batch and the last output in ``seen``, and stop the loop at the end."""
    open_inputs, take, outputs = svc.inputs.open, svc.intake.take, svc.outputs

    def metered_open(
        consumer: BatchConsumer, offsets: dict[str, int] | None, fresh: BatchConsumer | None = None
    ) -> None:
        open_inputs(consumer, offsets, fresh)  # clients are up, input assigned: the node is about to poll
        report("ready")

    def metered_take(msgs: list, now: float) -> Admitted:
        t = time.time()
        if msgs and seen["first_at"] is None:
            seen["first_at"] = t
        batch = take(msgs, now)
        if msgs and t - (seen["report"] or 0.0) > 0.2:
            report("progress", consumed=svc.stats.consumed)
            seen["report"] = t
        final = all(b is not None and b >= FINAL_BOUNDARY for b in scheme.path.sunion.boundaries)
        if final or svc.stats.consumed >= job.stop_after:
            # The loop ends after this iteration's SUnion poll, produce and flush; the
            # final boundary has made every pending bucket stable.
            svc.running = False
        return batch

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
    svc.intake.take = metered_take  # type: ignore[method-assign]
    outputs.flush = metered(outputs.flush)  # type: ignore[method-assign]
    outputs.write = metered(outputs.write)  # type: ignore[method-assign]


def _run_profiled(svc: NodeService, job: Job) -> NodeStats:
    """``svc.run`` until the input's end, under cProfile if the job names a profile file."""
    prof = cProfile.Profile() if job.profile_out else None
    if prof:
        prof.enable()
    stats = svc.run(max_idle_s=job.idle_s, own_process=True)
    if prof:
        prof.disable()
        prof.dump_stats(job.profile_out)
    return stats


def _sample_after_flush(op: Any, seen: dict[str, float | None]) -> None:
    flush, store = op.flush, getattr(op, "store", None)
    if store is None:
        return

    def sampled(progress: Callable[[], None]) -> None:
        before = store.size_bytes()  # the segments before this flush deletes those no window needs
        flush(progress)
        seen["state_bytes"] = max(seen["state_bytes"] or 0.0, float(before), float(store.size_bytes()))

    op.flush = sampled
