"""The demo: examples/demo.yaml deployed on the embedded broker, a workload in, results out."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.live import Live
from rich.table import Table

from services.cli.common import fail, out
from services.core.paths import REPO_ROOT
from services.spec import Spec, load_spec

if TYPE_CHECKING:
    from confluent_kafka import Consumer

    from services.client.reader import StreamReader
    from services.deploy.deployment import Deployment

DEMO_SPEC = REPO_ROOT / "examples" / "demo.yaml"
EGRESS_TOPIC = "demo.hot_stats.stable"  # hot_stats' egress (``egress: true`` in the spec)
FIRST_RESULT_S = 60.0  # how long the demo waits for its first result before it may end


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


def _table(stats: dict[str, dict], counts: dict[str, int], produced: int, elapsed: float) -> Table:
    t = Table(
        title=f"hastream demo: {produced} readings in, {elapsed:.0f}s  "
        f"(hot_stats {counts['hot_stats']} windows, alerts {counts['alerts']})"
    )
    for c in ("sensor", "window", "count", "avg °F", "min", "max", "last alert"):
        t.add_column(c, justify="right" if c not in ("sensor", "window") else "left")
    for sensor in sorted(stats):
        w = stats[sensor]
        t.add_row(
            sensor,
            _clock(w.get("window_start", 0)) + "-" + _clock(w.get("window_end", 0)),
            str(w.get("count", "")),
            f"{w.get('avg', 0):.1f}",
            f"{w.get('min', 0):.0f}",
            f"{w.get('max', 0):.0f}",
            w.get("alert", ""),
        )
    return t


def deploy(spec: Spec, path: Path) -> Deployment:
    """Start a demo deployment on the embedded broker from nothing: a leftover one of the same name
    is stopped, and its records and topics deleted, so the demo shows only this run's results."""
    from services.deploy.deployment import Deployment
    from services.deploy.local import down, up

    ingresses = [n for n in spec.nodes if any(spec.streams[s].ingress for s in spec.node_inputs(n))]
    shape = (
        f"{len(spec.nodes) - len(ingresses)} nodes"
        + (f" and {len(ingresses)} ingress" if ingresses else "")
        + f", {max(map(spec.node_partitions, spec.nodes))} partitions"
        + f", {max(nd.replicas for nd in spec.nodes.values())} replica(s)"
    )
    out.print(
        f"[bold]deploying[/] {path.relative_to(REPO_ROOT)} ({shape}) on the embedded Kafka broker, fresh topics ..."
    )
    try:
        leftover = Deployment.load(spec.name)
        if leftover.running():
            down(leftover)
    except LookupError:
        pass
    try:
        return up(spec, path, fresh=True)
    except (OSError, RuntimeError) as e:
        raise fail(str(e)) from None


def run_demo(seconds: float, rate: float) -> None:
    from services.client.reader import StreamReader
    from services.deploy.local import down

    spec = load_spec(DEMO_SPEC)
    dep = deploy(spec, DEMO_SPEC)
    out.print(f"broker {dep.bootstrap}; services: {', '.join(p.role for p in dep.processes)}")
    produced = [0]
    done = threading.Event()
    readers = {s: StreamReader(spec, s, dep.bootstrap) for s in ("hot_stats", "alerts")}
    egress = _plain_reader(spec, dep.bootstrap)
    stats: dict[str, dict] = {}
    counts = {s: 0 for s in readers}
    feed = threading.Thread(target=_feed, args=(spec, dep.bootstrap, seconds, rate, produced, done), daemon=True)
    feed.start()
    plain = 0
    try:
        _watch(readers, stats, counts, produced, done)
        plain = _count_egress(egress, counts["hot_stats"])
    except KeyboardInterrupt:
        pass
    finally:
        for r in readers.values():
            r.close()
        egress.close()
        down(dep, stop_kafka=True)
    if not out.is_terminal:
        out.print()  # a live display ends without a newline when output is not a terminal
    out.print(
        f"[green]done[/]: {produced[0]} readings in; {counts['hot_stats']} window results and "
        f"{counts['alerts']} alerts out; {plain} window results on {EGRESS_TOPIC} for any read_committed consumer. "
        "Try 'hastream up examples/demo.yaml' and 'hastream tail examples/demo.yaml hot_stats'."
    )


def _plain_reader(spec: Spec, bootstrap: str) -> Consumer:
    """A plain Kafka consumer of the egress topic of hot_stats, as any application would read it."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from services.core.kafka import READ_COMMITTED, plain_consumer

    c = plain_consumer(bootstrap, "demo", unique=True, **READ_COMMITTED)
    c.assign([TopicPartition(EGRESS_TOPIC, p, OFFSET_BEGINNING) for p in range(spec.streams["hot_stats"].partitions)])
    return c


def _count_egress(c: Consumer, expected: int, wait_s: float = FIRST_RESULT_S) -> int:
    """The records ``c`` reads of the egress topic: until none came for 0.5 s once it has the
    ``expected`` window results hastream's reader read (more would be duplicates), for 3 s before
    that, or for ``wait_s`` before the first (on a loaded machine the egress's replicas may become
    primary only after the demo's last result)."""
    n, last = 0, time.monotonic()
    quiet_s = wait_s if expected else 0.5
    while time.monotonic() - last < quiet_s:
        got = [m for m in c.consume(500, 0.2) if m.error() is None]
        if got:
            n, last = n + len(got), time.monotonic()
            quiet_s = 0.5 if n >= expected else 3.0
    return n


def _feed(spec: Spec, bootstrap: str, seconds: float, rate: float, produced: list[int], done: threading.Event) -> None:
    """The workload in, counting in ``produced[0]``; sets ``done`` at its end."""
    from services.client.pump import pump
    from services.client.source import SourceWriter
    from services.client.workload import readings

    # Live event time and periodic boundaries, so the nodes' SUnions can close buckets.
    writer = SourceWriter(spec, "readings", bootstrap, wall_clock=True)
    pump(
        writer,
        readings(int(seconds * rate), sensors=6, wall_clock=True),
        rate,
        progress=lambda n: produced.__setitem__(0, n),
    )
    done.set()


def _watch(
    readers: dict[str, StreamReader],
    stats: dict[str, dict],
    counts: dict[str, int],
    produced: list[int],
    done: threading.Event,
) -> None:
    """The live table of results, until the workload is in and no result came for 3 s (once the first
    came: services that start slowly, on a loaded machine or a broker just started, are waited for up
    to ``FIRST_RESULT_S``)."""
    t0 = time.monotonic()
    with Live(_table(stats, counts, 0, 0), console=out, refresh_per_second=4) as live:
        quiet_since = None
        while True:
            got = _read(readers, stats, counts)
            live.update(_table(stats, counts, produced[0], time.monotonic() - t0))
            started = any(counts.values()) or time.monotonic() - t0 > FIRST_RESULT_S
            if done.is_set() and started:
                quiet_since = quiet_since or time.monotonic()
                if got:
                    quiet_since = time.monotonic()
                if time.monotonic() - quiet_since > 3:
                    break


def _read(readers: dict[str, StreamReader], stats: dict[str, dict], counts: dict[str, int]) -> int:
    """One poll of every output into ``stats`` (by sensor) and ``counts`` (by stream); returns the results read."""
    got = 0
    for s, r in readers.items():
        for tup in r.poll(timeout=0.1):
            if tup.value is None:
                continue  # BOUNDARY, UNDO, REC_DONE: control tuples, not results
            got += 1
            counts[s] += 1
            v = tup.value
            if s == "hot_stats":
                stats.setdefault(v["key"], {}).update(v)
            else:
                stats.setdefault(v["sensor"], {})["alert"] = f"{v['value']:.0f}°F"
    return got
