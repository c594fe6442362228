"""The fault-tolerance demo: the replicated chain of examples/chain.yaml through kill -9 and a stopped source.

It deploys three nodes with two replicas each, plus the coordinator. Three sources feed it
live, and a scripted schedule injects real faults. A live table shows what DPC promises:
every replica's state, tentative results while an input is down, UNDO and corrections
afterwards. At the end the demo checks that both replicas of the output hold the same
stable sequence.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from rich.live import Live
from rich.table import Table

from services.cli.common import out
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.core.paths import REPO_ROOT
from services.spec import Spec, load_spec

if TYPE_CHECKING:
    from services.client.source import SourceWriter
    from services.client.view import StreamView
    from services.deploy.deployment import Deployment

CHAIN_SPEC = REPO_ROOT / "examples" / "chain.yaml"
STATE_STYLE = {
    NodeState.STABLE: "green",
    NodeState.UPSTREAM_FAILURE: "yellow",
    NodeState.STABILIZATION: "cyan",
    NodeState.RECOVERING: "magenta",
    NodeState.FAILED: "red",
}


def schedule(seconds: float) -> list[tuple[float, str, str]]:
    """(at, action, target): a replica killed and restarted, then a source stopped for 6 s."""
    s = seconds / 30
    return [
        (6 * s, "kill", "n2.r0.p0"),
        (11 * s, "restart", "n2.r0.p0"),
        (14 * s, "stop-source", "s2"),
        (20 * s, "resume-source", "s2"),
    ]


def run_chain_demo(seconds: float, rate: float) -> None:
    from services.cli.demo import deploy
    from services.client.view import StreamView
    from services.deploy.local import down

    spec = load_spec(CHAIN_SPEC)
    dep = deploy(spec, CHAIN_SPEC)
    monitor = ReplicaMonitor(dep.bootstrap, spec.heartbeat_topic, spec.dpc.failure_timeout / 1000)
    _wait_stable(spec, monitor)
    stop = threading.Event()
    writers = _start_sources(spec, dep.bootstrap, seconds, rate, stop)
    view = StreamView(spec, "stats", dep.bootstrap, monitor=monitor)
    counts = {"stable": 0, "tentative": 0, "undo": 0, "rec_done": 0}
    agree: bool | None = None
    try:
        _watch(spec, dep, monitor, view, writers, counts, seconds)
        agree = replicas_agree(spec, dep.bootstrap)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        view.close()
        monitor.close()
        down(dep, stop_kafka=True)
    _report(counts, agree)


def _wait_stable(spec: Spec, monitor: ReplicaMonitor, timeout: float = 60) -> None:
    """Wait (at most ``timeout`` seconds) until every replica reports STABLE, so the faults hit a running chain."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(
        monitor.state(n, 0, r) is NodeState.STABLE for n in spec.nodes for r in range(spec.nodes[n].replicas)
    ):
        time.sleep(0.2)


def _start_sources(
    spec: Spec, bootstrap: str, seconds: float, rate: float, stop: threading.Event
) -> dict[str, SourceWriter]:
    """A live writer per source, each fed at ``rate`` by its own thread until ``stop``; by source name."""
    from services.client.pump import pump
    from services.client.source import SourceWriter
    from services.client.workload import readings

    writers = {s: SourceWriter(spec, s, bootstrap, wall_clock=True) for s in spec.sources()}
    for i, w in enumerate(writers.values()):
        recs = readings(int(seconds * rate), sensors=4, seed=i + 1, wall_clock=True)
        threading.Thread(target=pump, args=(w, recs, rate), kwargs={"stop": stop.is_set}, daemon=True).start()
    return writers


def _watch(
    spec: Spec,
    dep: Deployment,
    monitor: ReplicaMonitor,
    view: StreamView,
    writers: dict[str, SourceWriter],
    counts: dict[str, int],
    seconds: float,
) -> None:
    """The live table for ``seconds`` and 15 more, with the scheduled faults injected on time and the
    events of ``view`` counted in ``counts``."""
    events: list[str] = []
    plan = schedule(seconds)
    t0 = time.monotonic()
    with Live(_table(spec, monitor, counts, events, 0), console=out, refresh_per_second=4) as live:
        while time.monotonic() - t0 < seconds + 15:
            el = time.monotonic() - t0
            while plan and plan[0][0] <= el:
                _, action, target = plan.pop(0)
                _inject(dep, writers, action, target)
                events.append(f"{el:4.0f}s {action} {target}")
            for ev in view.poll():
                counts[ev.kind] = counts.get(ev.kind, 0) + 1
            live.update(_table(spec, monitor, counts, events, time.monotonic() - t0))


def _inject(dep: Deployment, writers: dict[str, SourceWriter], action: str, target: str) -> None:
    """One fault of the schedule: a replica killed or restarted, a source stopped or resumed."""
    from services.deploy import faults

    if action == "kill":
        faults.kill(dep, target)
    elif action == "restart":
        faults.restart(dep, target)
    elif action == "stop-source":
        writers[target].request_hold(True)
    else:
        writers[target].request_hold(False)


def _table(spec: Spec, monitor: ReplicaMonitor, counts: dict[str, int], events: list[str], elapsed: float) -> Table:
    """Every replica's DPC state, the output's tuples by type, and the last faults."""
    t = Table(
        title=f"hastream DPC demo, {elapsed:.0f}s: stats = {counts['stable']} stable, "
        f"{counts['tentative']} tentative, {counts['undo']} undo, {counts['rec_done']} rec_done"
    )
    t.add_column("node")
    for r in range(2):
        t.add_column(f"replica {r}")
    for n in spec.nodes:
        cells = []
        for r in range(2):
            st = monitor.state(n, 0, r)
            cells.append(f"[{STATE_STYLE[st]}]{st.value}[/]")
        t.add_row(n, *cells)
    t.add_row("", "", "")
    for e in events[-5:]:
        t.add_row("[dim]fault[/]", e, "")
    return t


def _report(counts: dict[str, int], agree: bool | None) -> None:
    if not out.is_terminal:
        out.print()
    out.print(
        f"[green]done[/]: {counts['stable']} stable window results, {counts['tentative']} tentative ones "
        f"while an input was down, {counts['undo']} UNDO and {counts['rec_done']} REC_DONE."
    )
    if agree is not None:
        out.print(
            "both replicas of 'stats' hold the same stable sequence"
            if agree
            else "[red]the replicas of 'stats' disagree[/]: see the logs under .hastream/deployments/chain/logs"
        )


def replicas_agree(spec: Spec, bootstrap: str, stream: str = "stats", timeout: float = 30) -> bool:
    """Whether every replica topic of ``stream`` ends with the same, non-empty, stable sequence.

    Each replica is read as a client reads it (``StreamReader`` into one ``PartitionView`` per
    partition, applying UNDO and dropping duplicates), until they agree or ``timeout`` passes.
    """
    from services.client.partition import PartitionView
    from services.client.reader import StreamReader

    replicas = range(len(spec.stream_topics(stream)))
    readers = [StreamReader(spec, stream, bootstrap, replica=r) for r in replicas]
    views = [[PartitionView(p) for p in range(rd.partitions)] for rd in readers]

    def agree() -> bool:
        for reader, vs in zip(readers, views, strict=True):
            for t in reader.poll(timeout=0.05, max_messages=10_000):
                vs[t.partition].apply(t.meta.type, t.meta.id, t.meta.stime, t.value, [])
        finals = {tuple(tuple(map(repr, v.stable)) for v in vs) for vs in views}
        return len(finals) == 1 and any(v.stable for v in views[0])

    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if agree():
                return True
            time.sleep(0.2)
        return agree()
    finally:
        for reader in readers:
            reader.close()
