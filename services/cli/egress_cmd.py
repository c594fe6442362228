"""``hastream egress SPEC STREAM``: write one egress topic of a stream (its ``egress:`` in the spec) until stopped.

Any Kafka consumer reading the topic with ``isolation.level=read_committed`` gets each stable
tuple once, in id order per partition, as a plain record (``services.egress``). A process started
again, or a second one, takes every partition over and goes on where the last commit left it.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from typing import Annotated, Any, Callable

import typer
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from rich.markup import escape

from services.cli.common import BootstrapOpt, SpecArg, bootstrap_for, fail, out, service_logging, spec_or_exit
from services.core.codec import codec_for
from services.core.errors import HastreamError
from services.core.kafka import READ_COMMITTED, plain_consumer
from services.egress.latest import KIND_HEADER
from services.egress.records import record_id
from services.spec import Spec
from services.spec.egress import egress_node, egress_topic
from services.spec.model import EgressDef


def egress(
    spec: SpecArg,
    stream: Annotated[str, typer.Argument(help="A node's output stream with 'egress:' in the spec.")],
    mode: Annotated[str, typer.Option(help="Which of its egresses: stable or latest.")] = "stable",
    partition: Annotated[
        int | None, typer.Option(help="Run this partition's replica under the coordinator (with --replica).")
    ] = None,
    replica: Annotated[int, typer.Option(help="Replica index of this process, with --partition.")] = 0,
    idle: Annotated[float, typer.Option(help="Stop after this many seconds without tuples (0 = never).")] = 0,
    bootstrap: BootstrapOpt = None,
) -> None:
    """Write a stream's egress topic for any read_committed consumer, until SIGTERM: every partition
    in this process, or with --partition one replica of one partition that the coordinator makes
    primary or secondary (what 'hastream up' runs)."""
    s = spec_or_exit(spec)
    chosen = egress_of(s, stream, mode)
    parts, copies = s.streams[stream].partitions, chosen.replicas
    if partition is not None and not 0 <= partition < parts:
        raise fail(f"stream '{stream}' has partitions 0..{parts - 1}; got --partition {partition}")
    if not 0 <= replica < copies:
        raise fail(f"the {mode} egress of '{stream}' has replicas 0..{copies - 1}; got --replica {replica}")
    where = "" if partition is None else f".r{replica}.p{partition}"
    service_logging(f"{egress_node(stream, mode)}{where}")
    running = [True]

    def stop(*_: object) -> None:
        running[0] = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    found = bootstrap_for(s, bootstrap, stream)
    try:
        if partition is None:
            written = _pump(s, stream, chosen, found, lambda: running[0], idle)
        else:
            written = _replica(s, stream, chosen, partition, replica, found, lambda: running[0])
    except HastreamError as e:  # fenced by a newer egress process, or a gap in the stream: say which
        raise fail(str(e)) from None
    topic = egress_topic(s, stream, chosen)
    out.print(f"egress {stream} ({mode}) to {topic} stopped: {written} stable tuples written")


def _pump(spec: Spec, stream: str, chosen: EgressDef, bootstrap: str, running: Callable[[], bool], idle: float) -> int:
    """Every partition in this process, no coordinator: a second process takes them all over."""
    from services.egress.pump import EgressPump

    pump = EgressPump(spec, stream, chosen, bootstrap)
    logging.getLogger("hastream.egress").info("writing %s from stream %s", pump.topic, stream)
    last = time.monotonic()
    try:
        while running() and not (idle and time.monotonic() - last > idle):
            if pump.step():
                last = time.monotonic()
    finally:
        pump.close()
    return sum(w.written for w in pump.stable.values())


def _replica(
    spec: Spec,
    stream: str,
    chosen: EgressDef,
    partition: int,
    replica: int,
    bootstrap: str,
    running: Callable[[], bool],
) -> int:
    """One replica of one partition, primary or secondary as the coordinator says."""
    from services.egress.service import EgressService

    service = EgressService(spec, stream, chosen, partition, replica, bootstrap)
    service.run(running)
    return service.written


def egress_of(spec: Spec, stream: str, mode: str) -> EgressDef:
    """The ``mode`` egress of ``stream``, or the one line that says what the spec lacks."""
    if stream not in spec.streams:
        raise fail(f"no stream '{stream}' in the spec (streams: {', '.join(spec.streams)})")
    egresses = {e.mode: e for e in spec.streams[stream].egress}
    if mode not in egresses:
        have = ", ".join(egresses) or "none"
        raise fail(f"stream '{stream}' has no '{mode}' egress (its egresses: {have}): add it under 'egress:'")
    return egresses[mode]


def tail_egress(
    spec: Spec, stream: str, mode: str, bootstrap: str | None, limit: int, idle: float, as_json: bool
) -> None:
    """Print what a consumer of the egress topic reads (``read_committed``): each record's partition,
    id, key and value; for ``latest``, what a tombstone withdraws."""
    e, sd = egress_of(spec, stream, mode), spec.streams[stream]
    decode = _json_value if e.format == "json" else codec_for(sd.schema).decode
    c = plain_consumer(bootstrap_for(spec, bootstrap, stream), "tail", unique=True, **READ_COMMITTED)
    topic = egress_topic(spec, stream, e)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(sd.partitions)])
    n, last = 0, time.monotonic()
    try:
        while not (idle and time.monotonic() - last > idle) and not (limit and n >= limit):
            for m in c.consume(100, 0.2):
                if m.error() is None:
                    last, n = time.monotonic(), n + 1
                    _print_record(m.partition() or 0, dict(m.headers() or []), m.key(), m.value(), decode, as_json)
    except KeyboardInterrupt:
        pass
    finally:
        c.close()


def _json_value(value: bytes | None) -> Any:
    return json.loads(value) if value is not None else None


def _print_record(
    partition: int, headers: dict, key: bytes | None, value: bytes | None, decode: Callable[[bytes], Any], as_json: bool
) -> None:
    rid = record_id(headers)
    kind = (headers.get(KIND_HEADER) or b"stable").decode()
    rec = decode(value) if value is not None else None
    if as_json:
        print(json.dumps({"partition": partition, "id": rid, "kind": kind, "key": (key or b"").decode(), "value": rec}))
    elif rec is None:
        out.print(f"[magenta]withdrawn[/] p{partition} key={escape((key or b'').decode())}")
    else:
        tag = "[green]S[/]" if kind == "stable" else "[bold yellow]T[/]"
        out.print(f"{tag} p{partition} id={rid} key={escape((key or b'').decode())} {escape(json.dumps(rec))}")
