"""What share of a deployment's records are BOUNDARY tuples, at several input rates and while idle.

    python -m bench.boundaries [--seconds S] [--rates 5,50,500]

For each rate a fresh two-node chain (a filter+map node, then a sliding-window node; one
replica each, real processes) runs on an embedded broker. ``hastream produce``'s loop feeds it
wall-clock readings at the rate for S seconds, then keeps the source open and idle for S
more seconds, as a live source with nothing to say. Every topic of the chain is then read
from the start and its records counted: data tuples, standalone BOUNDARY records, and
boundaries that rode on a data tuple (a bound in its ``ht`` header). The share quoted is standalone
boundaries over all records, while the source sent and while it was idle. Results go to
``bench/results/boundaries.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from rich.console import Console
from rich.table import Table

from bench.borealis.common import broker, machine
from bench.harness import ServiceProcesses
from services.client.pump import pump
from services.client.source import SourceWriter, wall_ms
from services.client.workload import readings
from services.core.kafka import plain_consumer
from services.core.paths import REPO_ROOT
from services.core.tuples import STABLE, TupleType, carries_bound, peek
from services.deploy.topics import provision
from services.spec import Spec, parse_spec

RESULTS = REPO_ROOT / "bench" / "results" / "boundaries.json"
console = Console(stderr=True, highlight=False)

SPEC = """\
name: bounds-{u}
defaults: {{partitions: 1, replicas: 1}}
streams:
  readings_{u}: {{schema: reading, key: sensor}}
  scaled_{u}: {{schema: reading, key: sensor}}
  stats_{u}: {{schema: window_stat, key: key}}
operators:
  scale: {{type: map, input: readings_{u}, output: scaled_{u}, fields: {{sensor: sensor, ts: ts, value: "value * 2", seq: seq}}}}
  per_sensor: {{type: window, input: scaled_{u}, output: stats_{u}, key: sensor, size: 1000, slide: 500,
               aggregates: {{count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}}}
nodes:
  scaler: {{operators: [scale]}}
  stats: {{operators: [per_sensor]}}
"""


def _count(bootstrap: str, topic: str, split_ms: int) -> dict[str, Counter[str]]:
    """Records of ``topic`` by kind ("data", "boundary", "carried" boundaries, "other"), before and after ``split_ms``."""
    c = plain_consumer(bootstrap, "bench.bounds", unique=True)
    phases: dict[str, Counter[str]] = {"active": Counter(), "idle": Counter()}
    try:
        tp = TopicPartition(topic, 0)
        low, high = c.get_watermark_offsets(tp, timeout=10)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        last, deadline = low - 1, time.monotonic() + 60
        while last < high - 1 and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                if m.error() is not None:
                    continue
                last = m.offset() or 0
                counts = phases["active" if m.timestamp()[1] < split_ms else "idle"]
                ttype = peek(m.headers())[0]
                if ttype is STABLE:
                    counts["data"] += 1
                    if carries_bound(m.headers()):
                        counts["carried"] += 1
                elif ttype is TupleType.BOUNDARY:
                    counts["boundary"] += 1
                else:
                    counts["other"] += 1
    finally:
        c.close()
    return phases


def _run_rate(bootstrap: str, rate: int, seconds: float, log_dir: Path) -> dict[str, Any]:
    u = uuid.uuid4().hex[:6]
    text = SPEC.format(u=u)
    spec_path = log_dir / f"bounds-{u}.yaml"
    spec_path.write_text(text)
    spec: Spec = parse_spec(text, source=str(spec_path))
    provision(spec, bootstrap)
    procs = ServiceProcesses(spec, spec_path, bootstrap, log_dir / f"rate{rate}", coordinator=False)
    procs.start()
    try:
        time.sleep(4)  # the nodes subscribe before the first tuple
        writer = SourceWriter(spec, f"readings_{u}", bootstrap, wall_clock=True)  # as hastream produce
        pump(writer, readings(int(rate * seconds), sensors=4, seed=1, wall_clock=True), rate=rate, final_boundary=None)
        split = wall_ms()
        idle_until = time.monotonic() + seconds
        while time.monotonic() < idle_until:  # open and idle: time moves, nothing is sent
            writer.maybe_boundary()
            writer.producer.poll(0)
            time.sleep(0.02)
        writer.flush()
        time.sleep(2)  # the nodes pass on what they have
    finally:
        procs.stop()
    topics = {
        "source": spec.topic(f"readings_{u}"),
        "scaler": spec.topic(f"scaled_{u}", 0),
        "stats": spec.topic(f"stats_{u}", 0),
    }
    return {name: {k: dict(v) for k, v in _count(bootstrap, t, split).items()} for name, t in topics.items()}


def _share(c: dict[str, int]) -> float:
    total = c.get("data", 0) + c.get("boundary", 0) + c.get("other", 0)
    return c.get("boundary", 0) / total if total else 0.0


def _table(results: dict[str, Any], seconds: float) -> Table:
    t = Table(title=f"standalone BOUNDARY records / all records ({seconds:g} s sending, then {seconds:g} s idle)")
    for col in ("rate /s", "topic", "records", "boundaries", "share", "carried on data", "idle boundaries /s"):
        t.add_column(col, justify="right")
    for rate, per_topic in results.items():
        for name, phases in per_topic.items():
            a, i = phases["active"], phases["idle"]
            records = sum(a.get(k, 0) for k in ("data", "boundary", "other"))
            t.add_row(
                str(rate),
                name,
                str(records),
                str(a.get("boundary", 0)),
                f"{_share(a):.1%}",
                str(a.get("carried", 0)),
                f"{i.get('boundary', 0) / seconds:.1f}",
            )
    return t


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.boundaries", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of sending, then as many idle (default 10)")
    ap.add_argument("--rates", default="5,50,500", help="input rates in tuples/s, comma-separated (default 5,50,500)")
    args = ap.parse_args(argv)
    try:
        rates = [int(r) for r in args.rates.split(",")]
    except ValueError:
        ap.error(f"--rates must be integers separated by commas, got {args.rates!r}")
    results: dict[str, Any] = {}
    with broker(console.print) as facts, tempfile.TemporaryDirectory(prefix="hastream-bounds-") as tmp:
        for rate in rates:
            console.print(f"rate {rate}/s: {args.seconds:g} s sending, {args.seconds:g} s idle")
            results[str(rate)] = _run_rate(facts["bootstrap"], rate, args.seconds, Path(tmp))
        doc = {"machine": machine(facts), "seconds": args.seconds, "results": results}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    Console(highlight=False).print(_table(results, args.seconds))
    console.print(f"results in {RESULTS.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
