"""The paper's chain, on a real broker: one run under one fault, with the client's view of it.

Three input streams s1, s2, s3 feed a chain of ``k`` nodes, each with two replicas (real
processes, plus the coordinator):

    s1, s2, s3 -> n1 (union + filter) -> n2 (map) -> ... -> nk (map) -> client

Every node is stateless and passes each tuple through (the filter keeps everything, each map
adds 1 to ``value``), so each output tuple stands for exactly one input tuple (``sensor`` =
``in<i>``, ``seq``) and per-tuple latency is exact. The paper's nodes are SUnion + join;
here the whole node state is SUnion's buffer and the operators' (empty) state, which is what
reconciliation must rebuild.

One run: start the services, start the client (a ``StreamView`` following the best replica of
the last node's output, as an application would), send the paced workload, inject the fault,
wait until every replica and the client hold the complete stable output, then compute the
metrics (``metrics.py``) and check eventual consistency against the expected output.
"""

from __future__ import annotations

import multiprocessing
import re
import shutil
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.borealis import metrics
from bench.borealis.common import fill
from bench.harness import Recorder, ServiceProcesses
from bench.workload import BASE_TS, PacedSources, tick_workload
from services.client.view import StreamView
from services.control.messages import COORDINATOR
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.core.admin import delete_topics
from services.core.tuples import TupleType
from services.deploy.topics import provision
from services.spec import Spec, parse_spec
from services.spec.topics import all_topics

INPUTS = 3
FAILED_INPUT = 2  # s2 is the input that is cut off
WARMUP_S = 1.0  # tuples generated in the first second do not count for Delay_new (first fetches)
NOTES = "chain"  # docs/templates/chain.md: the notes on runs that the sections add

POLICIES = {  # label -> (failure_policy, stabilization_policy)
    "Process & Process": ("process", "process"),
    "Delay & Delay": ("delay", "delay"),
    "Process & Suspend": ("process", "suspend"),
}


@dataclass(frozen=True)
class RunConfig:
    """One run. ``fault`` is "source" (input s2 cut off for ``fault_s``), "kill" (kill -9 of a
    replica on the client's path, restarted after ``fault_s``: the first node's if ``kill`` is
    "head", the last node's if "sink") or "none". The workload lasts ``fault_at + fault_s +
    tail_s`` seconds at ``rate`` tuples/s per input."""

    k: int = 1
    policy: str = "Process & Process"
    reconciliation: str = "checkpoint"
    x_ms: int = 3000  # the paper's X per node: every node waits alpha * x_ms (``delay_ms``)
    alpha: float = 0.9
    rate: int = 100
    fault: str = "source"
    fault_at: float = 5.0
    fault_s: float = 15.0
    tail_s: float = 12.0
    kill: str = "head"
    bucket_ms: int = 100
    heartbeat_ms: int = 100
    failure_timeout_ms: int = 800
    checkpoint_ms: int = 1000

    @property
    def seconds(self) -> float:
        return self.fault_at + self.fault_s + self.tail_s

    @property
    def alpha_x_s(self) -> float:
        return self.alpha * self.x_ms / 1000

    @property
    def delay_ms(self) -> int:
        """The spec's X (end to end) that gives every node the paper's wait alpha * x_ms: under a
        "process" failure policy only the first node of a path waits, and it may take alpha * X;
        under "delay" each of the k nodes holds in turn, alpha * X / k."""
        return self.x_ms if POLICIES[self.policy][0] == "process" else self.x_ms * self.k


def chain_spec(cfg: RunConfig, suffix: str) -> str:
    """The spec YAML of a k-node chain (streams and the spec name carry ``suffix`` so runs never share topics)."""
    fp, sp = POLICIES[cfg.policy]
    u = suffix
    lines = [
        f"name: borealis-{u}",
        "defaults: {partitions: 1, replicas: 2}",
        f"dpc: {{delay: {cfg.delay_ms}, alpha: {cfg.alpha}, bucket: {cfg.bucket_ms}, "
        f"restart_image_interval: {cfg.checkpoint_ms}, heartbeat_interval: {cfg.heartbeat_ms}, "
        f"failure_timeout: {cfg.failure_timeout_ms}, reconciliation: {cfg.reconciliation}, "
        f"failure_policy: {fp}, stabilization_policy: {sp}}}",
        "streams:",
        *[f"  s{i}_{u}: {{schema: reading, key: sensor}}" for i in range(1, INPUTS + 1)],
        f"  all_{u}: {{schema: reading, key: sensor}}",
        *[f"  out{j}_{u}: {{schema: reading, key: sensor}}" for j in range(1, cfg.k + 1)],
        "operators:",
        f"  merge: {{type: union, inputs: [{', '.join(f's{i}_{u}' for i in range(1, INPUTS + 1))}], output: all_{u}}}",
        f'  pass1: {{type: filter, input: all_{u}, output: out1_{u}, where: "value > -1"}}',
        *[
            f"  step{j}: {{type: map, input: out{j - 1}_{u}, output: out{j}_{u}, "
            f'fields: {{sensor: sensor, ts: ts, value: "value + 1", seq: seq}}}}'
            for j in range(2, cfg.k + 1)
        ],
        "nodes:",
        "  n1: {operators: [merge, pass1]}",
        *[f"  n{j}: {{operators: [step{j}]}}" for j in range(2, cfg.k + 1)],
    ]
    return "\n".join(lines) + "\n"


def workload(cfg: RunConfig, names: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Input i's record j: sensor ``in<i>``, event time ``BASE_TS + j * step``, seq j (all inputs in step)."""
    return tick_workload(names, cfg.rate, int(cfg.seconds * cfg.rate))


class Client:
    """The application: follows the best replica of the chain's output and notes when each tuple first
    arrived. It runs in a process of its own, as an application does: in the bench's process the
    recorder decodes every replica's output and the sources pace the input, and their share of the
    interpreter held the client back by tenths of a second when a reconciliation's corrections came.
    """

    def __init__(self, spec: Spec, stream: str, bootstrap: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stable_n, self._current = ctx.Value("i", 0), ctx.Value("i", 0)
        self._ready, self._stop = ctx.Event(), ctx.Event()
        self._results, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_follow,
            args=(spec, stream, bootstrap, self._stable_n, self._current, self._ready, self._stop, child),
            daemon=True,
        )
        self.first_seen: dict[metrics.Key, float] = {}
        self.kinds: Counter[str] = Counter()
        self.tentative_keys: set[metrics.Key] = set()  # a switch can deliver a tentative tuple twice
        self.switches = 0
        self._stable: list[dict[str, Any]] = []
        self._finished = False

    def start(self) -> None:
        """Start it and wait until it follows the stream (its view has had the monitor's start-up wait)."""
        self._proc.start()
        if not self._ready.wait(90):
            raise RuntimeError("the client process did not start following the stream within 90 s")

    @property
    def current(self) -> int:
        """The replica it reads now."""
        return int(self._current.value)

    def stable_count(self) -> int:
        return int(self._stable_n.value)

    def stable(self) -> list[dict[str, Any]]:
        """Its stable records, once ``finish`` has collected them."""
        return self._stable

    def finish(self) -> None:
        """Stop following and collect what it saw."""
        if self._finished or self._proc.pid is None:
            return
        self._finished = True
        self._stop.set()
        try:
            if self._results.poll(60):
                first_seen, kinds, keys, switches, stable = self._results.recv()
                self.first_seen, self.kinds, self.tentative_keys = first_seen, Counter(kinds), keys
                self.switches, self._stable = switches, stable
        except EOFError:
            pass  # it died: nothing seen, and the run's checks say so
        self._proc.join(10)

    def close(self) -> None:
        self.finish()
        if self._proc.is_alive():
            self._proc.kill()


def _follow(
    spec: Spec, stream: str, bootstrap: str, stable_n: Any, current: Any, ready: Any, stop: Any, out: Any
) -> None:
    """The client process: a ``StreamView`` polled until told to stop; then what it saw goes back."""
    view = StreamView(spec, stream, bootstrap, startup_wait=3.0)
    first_seen: dict[metrics.Key, float] = {}
    kinds: Counter[str] = Counter()
    keys: set[metrics.Key] = set()
    ready.set()
    while not stop.is_set():
        events = view.poll(timeout=0.02)
        now = time.monotonic()
        for e in events:
            kinds[e.kind] += 1
            if e.record is not None:
                key = (e.record["sensor"], e.record["seq"])
                first_seen.setdefault(key, now)
                if e.kind == "tentative":
                    keys.add(key)
        stable_n.value, current.value = len(view.views[0].stable), view.current[0]
    out.send((first_seen, dict(kinds), keys, len(view.switches), view.stable(0)))
    view.close()


def _wait_ready(spec: Spec, mon: ReplicaMonitor, timeout: float = 90) -> None:
    """Every node replica and the coordinator heartbeat STABLE: the run starts from a settled system."""
    want = [(n, r) for n in spec.nodes for r in range(spec.nodes[n].replicas)] + [(COORDINATOR, 0)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(mon.state(n, 0, r) is NodeState.STABLE for n, r in want):
            return
        time.sleep(0.2)
    raise TimeoutError(
        "services did not all become STABLE within 90 s: "
        + ", ".join(f"{n}.r{r}={mon.state(n, 0, r).value}" for n, r in want)
    )


def victim(cfg: RunConfig, client_replica: int, log_dir: Path, suffix: str) -> str:
    """The role to kill: the replica the client reads ("sink"), or the first node's replica at the
    head of the path of replicas that feeds it ("head").

    Replica r of a node starts reading replica r upstream but may have switched (at start-up a
    partner's heartbeat can be seen first); a node logs each switch, so the path is read back
    from the logs, last node first.
    """
    r = client_replica
    if cfg.kill == "sink":
        return f"n{cfg.k}.r{r}.p0"
    for j in range(cfg.k, 1, -1):
        log = (log_dir / f"n{j}.r{r}.p0.log").read_text(errors="replace")
        reads = re.findall(rf"now reads out{j - 1}_{suffix}\.r(\d+)", log)
        r = int(reads[-1]) if reads else r
    return f"n1.r{r}.p0"


def run_once(cfg: RunConfig, bootstrap: str, log_dir: Path | None = None) -> dict[str, Any]:
    """One run of the chain under ``cfg``'s fault; returns the metrics and the consistency verdict."""
    suffix = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix=f"borealis-k{cfg.k}-"))
    path = tmp / "spec.yaml"
    path.write_text(chain_spec(cfg, suffix))
    spec = parse_spec(path.read_text(), str(path), path)
    provision(spec, bootstrap)
    services = ServiceProcesses(spec, path, bootstrap, log_dir or tmp / "logs")
    mon = ReplicaMonitor(bootstrap, spec.heartbeat_topic, spec.dpc.failure_timeout / 1000)
    names = spec.sources()
    outputs = [f"out{j}_{suffix}" for j in range(1, cfg.k + 1)]
    recorder = client = None
    killed = None
    keep_logs = True  # a run that crashes or ends inconsistent keeps its services' logs
    t_start = time.monotonic()
    try:
        services.start()
        _wait_ready(spec, mon)
        startup_s = time.monotonic() - t_start
        recorder = Recorder(spec, bootstrap, outputs)
        client = Client(spec, outputs[-1], bootstrap)
        client.start()
        sources = PacedSources(spec, bootstrap, workload(cfg, names), cfg.rate).start()
        t0 = time.monotonic()
        outage = None
        time.sleep(max(0.0, t0 + cfg.fault_at - time.monotonic()))
        if cfg.fault == "source":
            t_fault = time.monotonic()
            sources.hold(names[FAILED_INPUT - 1], cfg.fault_s)
            # The source thread may stamp a tuple just before the cut and send it just after: one tick of slack.
            outage = metrics.Outage(f"in{FAILED_INPUT}", t_fault - 2 / cfg.rate, t_fault + cfg.fault_s)
        elif cfg.fault == "kill":
            killed = victim(cfg, client.current, services.log_dir, suffix)
            services.kill(killed)
            time.sleep(max(0.0, t0 + cfg.fault_at + cfg.fault_s - time.monotonic()))
            services.start(killed)
        sources.join(cfg.seconds + 120)
        if outage is not None:  # a tuple stamped just before the cut but sent after it was held too
            held = sources.first_held.get(names[FAILED_INPUT - 1], outage.start)
            outage = metrics.Outage(outage.sensor, min(outage.start, held), outage.end)
        t_sent = time.monotonic()
        total = INPUTS * int(cfg.seconds * cfg.rate)

        def complete() -> bool:
            return client.stable_count() >= total and all(
                recorder.replica(s, r).stable_count() >= total for s in outputs for r in range(2)
            )

        settled = recorder.wait_for(complete, 120)
        settle_s = time.monotonic() - t_sent
        time.sleep(1.0)  # late tentative or duplicate messages would show up now
        client.finish()
        r = _result(cfg, spec, sources, recorder, client, outputs, outage, t0, settled, startup_s, settle_s)
        if killed:
            r["killed"] = killed
        keep_logs = not r["consistent"]
        if keep_logs:
            r["logs"] = str(services.log_dir)
        return r
    finally:
        try:
            if client is not None:
                client.close()
        finally:  # the services stop whatever the client did
            mon.close()
            services.stop()
            if recorder is not None:
                recorder.close()
            try:
                delete_topics(bootstrap, [t for t, _ in all_topics(spec)])
            except Exception:  # noqa: BLE001 - cleanup only; a temp broker goes away anyway
                pass
        if log_dir is None and not keep_logs:
            shutil.rmtree(tmp, ignore_errors=True)


def _result(
    cfg: RunConfig,
    spec: Spec,
    sources: PacedSources,
    recorder: Recorder,
    client: Client,
    outputs: list[str],
    outage: metrics.Outage | None,
    t0: float,
    settled: bool,
    startup_s: float,
    settle_s: float,
) -> dict[str, Any]:
    step = 1000 // cfg.rate
    ticks = int(cfg.seconds * cfg.rate)
    generated = {
        (f"in{i}", j): sources.sent_at[BASE_TS + j * step]
        for i in range(1, INPUTS + 1)
        for j in range(ticks)
        if BASE_TS + j * step in sources.sent_at
    }
    d = metrics.delays(client.first_seen, generated, outage, since=t0 + WARMUP_S)
    summ = metrics.summary(d)
    consistency: dict[str, Any] = {}
    for j, s in enumerate(outputs, 1):
        want = [{**r, "ts": BASE_TS + r["ts"] * step} for r in metrics.chain_output(ticks, INPUTS, j)]
        for r in range(2):
            consistency[f"n{j}.r{r}"] = metrics.compare([v for _, v in recorder.replica(s, r).final_stable()], want)
        if j == cfg.k:
            consistency["client"] = metrics.compare(client.stable(), want)
    undone = [m for s in outputs for r in range(2) for m in recorder.replica(s, r).undid_stable()]
    sink = [recorder.replica(outputs[-1], r) for r in range(2)]
    return {
        "config": {
            **asdict(cfg),
            "alpha_x_s": cfg.alpha_x_s,
            "delay_ms": cfg.delay_ms,
            "node_delay_s": spec.node_delay_s("n1"),
        },
        **summ,
        "n_tentative": client.kinds["tentative"],
        "tentative_unique": len(client.tentative_keys),
        "client_events": dict(client.kinds),
        "client_switches": client.switches,
        "missing": metrics.missing(client.first_seen, generated),
        "sink_tentative_per_replica": [o.count(TupleType.TENTATIVE) for o in sink],
        "sink_undo_per_replica": [o.count(TupleType.UNDO) for o in sink],
        "timeline": metrics.timeline(d, generated, t0),
        "late_tuples": [
            [key[0], key[1], round(generated[key] - t0, 2), round(v, 2)]  # input, seq, generated at, delay
            for key, v in sorted(d.items(), key=lambda kv: -kv[1])[:10]
            if v > summ["p99_s"] + cfg.alpha_x_s
        ],
        "consistent": settled and all(c["ok"] for c in consistency.values()) and not undone,
        "settled": settled,
        "consistency": consistency,
        "stable_undone": undone[:5],
        "startup_s": round(startup_s, 1),
        "settle_s": round(settle_s, 1),
    }


def run_series(name: str, runs: list[tuple[str, RunConfig]], progress: Any) -> list[dict[str, Any]]:
    """Run each labelled config in turn on the experiments' broker. A run that crashes is kept as an
    error entry (and counts as inconsistent), never dropped, so the figures show it."""
    from bench.borealis.common import bootstrap

    out = []
    for label, cfg in runs:
        progress(f"{name}: {label}")
        t0 = time.monotonic()
        try:
            r = run_once(cfg, bootstrap())
        except Exception as e:  # noqa: BLE001 - recorded in the results, the other runs go on
            r = {"config": asdict(cfg), "error": f"{type(e).__name__}: {e}", "consistent": False}
        r["label"], r["wall_s"] = label, round(time.monotonic() - t0, 1)
        out.append(r)
        if "error" in r:
            progress.note(f"{name} {label}: [red]error[/] {r['error']}")
        else:
            progress.note(
                f"{name} {label}: Delay_new {r['delay_new_s']:.2f}s, N_tentative {r['n_tentative']}, "
                f"{'consistent' if r['consistent'] else '[red]INCONSISTENT[/]'} ({r['wall_s']:.0f}s)"
            )
        progress.advance()
    return out


def verdict(r: dict[str, Any]) -> str:
    """Eventual consistency of one run, for tables: every replica and the client hold the expected output."""
    if "error" in r:
        return f"**error** ({r['error'][:60]})"
    return (
        "yes"
        if r["consistent"]
        else f"**NO** ({', '.join(k for k, c in r['consistency'].items() if not c['ok']) or 'unsettled'})"
    )


def outliers(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs whose Delay_new comes from a few tuples far above all others (max > p99 + αX)."""
    return [r for r in runs if "error" not in r and r["delay_new_s"] > r["p99_s"] + r["config"]["alpha_x_s"]]


def outlier_note(runs: list[dict[str, Any]]) -> str:
    """A sentence naming the runs whose Delay_new comes from a few late tuples (empty if none)."""
    bad = outliers(runs)
    if not bad:
        return ""
    which = "; ".join(
        fill(NOTES, "outlier-run", label=r["label"], delay=f"{r['delay_new_s']:.1f}", p99=f"{r['p99_s']:.1f}")
        for r in bad
    )
    where = fill(NOTES, "outlier-where-late" if all(r.get("late_tuples") for r in bad) else "outlier-where")
    return fill(NOTES, "outlier", runs=which, where=where) + "\n"


def repeat_note(runs: list[dict[str, Any]]) -> str:
    """A sentence naming the runs where the client received tuples tentatively twice (empty if none)."""
    rep = [r for r in runs if "error" not in r and r["n_tentative"] > r.get("tentative_unique", r["n_tentative"])]
    if not rep:
        return ""
    which = "; ".join(
        fill(NOTES, "repeat-run", label=r["label"], received=r["n_tentative"], distinct=r["tentative_unique"])
        for r in rep
    )
    return fill(NOTES, "repeat", runs=which) + "\n"


def peak_before_heal(r: dict[str, Any]) -> float | None:
    """How long before the failure healed the tuples with the largest delay were generated (s)."""
    if not r.get("timeline"):
        return None
    t, _ = max(r["timeline"], key=lambda p: p[1])
    c = r["config"]
    return c["fault_at"] + c["fault_s"] - t


def over_x_note(runs: list[dict[str, Any]]) -> str:
    """A sentence on the runs whose Delay_new broke k·X under a policy the paper holds to it: every
    one but Process & Suspend, which it shows cannot keep X once reconciliation outlasts it (empty if none)."""
    bad = [
        r
        for r in runs
        if "error" not in r
        and r["config"]["policy"] != "Process & Suspend"
        and r["delay_new_s"] > r["config"]["k"] * r["config"]["x_ms"] / 1000
    ]
    if not bad:
        return ""
    which = "; ".join(
        fill(
            NOTES,
            "over-x-run",
            label=r["label"],
            delay=f"{r['delay_new_s']:.2f}",
            before=f"{peak_before_heal(r) or 0:.1f}",
            switches=r.get("client_switches", 0),
        )
        for r in bad
    )
    return fill(NOTES, "over-x", runs=which) + "\n"
