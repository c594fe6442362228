"""Failover time seen by a client when the replica it reads is killed (beyond the paper).

    python -m bench.borealis.failover [--quick]

The paper measures what input failures do to outputs and says in one sentence that switching
between upstream replicas takes a node "approximately <n> ms". This measures the same thing
from an application's side, on a real broker with real processes. One node has two replicas
fed by one paced source: a pass-through filter, so every input tuple gives exactly one output
tuple with the same ``seq``. A client (``StreamView``) follows the best replica of the output.
Each trial:

1. waits a random fraction of a heartbeat interval, then kill -9s the replica the client is
   reading (``view.current``);
2. measures the time from the kill to the first tuple the client receives from the other
   replica. This is the *failover time*. Tuples of the killed replica still in flight are
   not counted: they were produced before the kill.
3. splits it into *detection* (kill to the client's switch: the heartbeat of the killed
   replica must be ``failure_timeout`` old) and *switch* (finding the offset after the last
   stable id in the other replica's topic, then fetching). The time since the killed
   replica's last heartbeat was sent is recorded too: detection should be
   ``failure_timeout`` minus that age, plus up to the client's 50 ms check interval;
4. restarts the killed replica and waits until it heartbeats STABLE and its output topic has
   caught up with the client (so the next kill finds a ready partner);
5. checks the client's stable sequence: no gap (``PartitionView.gaps``), and ``seq`` dense
   from 0 (so no duplicate was delivered either). ``duplicates`` counts the stable tuples the
   view dropped by id, which is how it avoids delivering them twice.

Two settings of failure detection are compared: hastream's defaults (heartbeat every 200 ms,
failed after 1000 ms of silence) and a faster one (100 ms / 400 ms). The coordinator is not
started: no replica reconciles here (the source never fails), so it has nothing to decide.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from rich.progress import Progress

from bench.borealis.common import fill, pyplot, save_footnoted
from bench.borealis.reconcile import Steps
from bench.harness import ServiceProcesses
from bench.workload import BASE_TS, PacedSources, tick_records
from services.client.view import StreamView
from services.control.messages import now_ms
from services.control.monitor import ReplicaMonitor
from services.control.states import NodeState
from services.core.admin import delete_topics
from services.deploy.topics import provision
from services.log.tail import last_stable_id
from services.spec import Spec, parse_spec
from services.spec.topics import all_topics

NAME = "failover"
PAGE = "failover"  # docs/templates/failover.md: the section's text
RATE = 100  # tuples/s from the source
NODE = "n1"
SETTINGS = [  # (label, heartbeat_interval ms, failure_timeout ms)
    ("default (200/1000 ms)", 200, 1000),
    ("fast (100/400 ms)", 100, 400),
]
QUICK = {"trials": 10}
FULL = {"trials": 50}
PAPER = (
    "it takes a node approximately <n> ms to switch between upstream neighbors (SIGMOD'05 §6; the digit "
    "is lost in the repository's copy). That is a switch with the failure already known: the paper does "
    "not measure how long detecting a crashed replica takes."
)


def spec_text(u: str, heartbeat_ms: int, timeout_ms: int) -> str:
    return f"""
name: failover-{u}
defaults: {{partitions: 1, replicas: 2}}
dpc: {{heartbeat_interval: {heartbeat_ms}, failure_timeout: {timeout_ms}, restart_image_interval: 1000}}
streams:
  in_{u}: {{schema: reading, key: sensor}}
  out_{u}: {{schema: reading, key: sensor}}
operators:
  pass: {{type: filter, input: in_{u}, output: out_{u}, where: "value > -1"}}
nodes:
  {NODE}: {{operators: [pass]}}
"""


def source(spec: Spec, stream: str, bootstrap: str) -> PacedSources:
    """Input 1's records at ``RATE`` tuples/s, a BOUNDARY after each batch, until ``stop()``."""
    return PacedSources(spec, bootstrap, {stream: tick_records(1, RATE)}, RATE)


def sent_at(src: PacedSources, seq: int) -> float:
    """When record ``seq`` was sent (monotonic)."""
    return src.sent_at[BASE_TS + seq * (1000 // RATE)]


class Client(threading.Thread):
    """The application: polls a ``StreamView`` and notes every data tuple and every switch with its arrival time."""

    def __init__(self, spec: Spec, stream: str, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.view = StreamView(spec, stream, bootstrap, startup_wait=3.0)
        self.events: list[tuple[float, int, int, str]] = []  # (monotonic, replica, seq, kind)
        self.switches: list[tuple[float, int, int]] = []  # (monotonic, from, to)
        self.kinds: Counter[str] = Counter()
        self.stop_event = threading.Event()

    def run(self) -> None:
        view = self.view
        while not self.stop_event.is_set():
            got = view.poll(timeout=0.01)
            now = time.monotonic()
            while len(self.switches) < len(view.switches):
                _, old, new, _ = view.switches[len(self.switches)]
                self.switches.append((now, old, new))
            for e in got:
                self.kinds[e.kind] += 1
                if e.record is not None:
                    self.events.append((now, e.replica, e.record["seq"], e.kind))

    def close(self) -> None:
        self.stop_event.set()
        self.join(5)
        self.view.close()


def _wait(pred: Any, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def _check_sequence(client: Client) -> tuple[bool, int]:
    """The client's stable records have seq 0, 1, 2, ... (no gap, no duplicate); returns (ok, length)."""
    stable = list(client.view.stable(0))
    return all(r["seq"] == i for i, r in enumerate(stable)), len(stable)


def trial(
    services: ServiceProcesses, spec: Spec, client: Client, src: PacedSources, bootstrap: str, hb_s: float
) -> dict[str, Any]:
    """One kill of the replica the client reads, its restart, and the client's view of both."""
    view, mon = client.view, client.view.monitor
    assert mon is not None
    time.sleep(random.uniform(0, hb_s))  # kill at a random phase of the heartbeat
    victim = view.current[0]
    role = f"{NODE}.r{victim}.p0"
    pv = view.views[0]
    gaps0, dups0 = pv.gaps, pv.duplicates
    n_before = len(client.events)
    t_kill, t_kill_ms = time.monotonic(), now_ms()
    services.kill(role)
    ok = _wait(lambda: any(r != victim for _, r, _, _ in client.events[n_before:]), 30, 0.005)
    # The dead process's last heartbeat, known for sure only now: one sent just before the
    # kill may still have been on its way then.
    st = mon.get(NODE, 0, victim)
    hb_age = (t_kill_ms - st.sent_ms) if st is not None and st.sent_ms <= t_kill_ms else float("nan")
    after = client.events[n_before:]
    first = next((e for e in after if e[1] != victim), None)
    in_flight = sum(1 for e in after if e[1] == victim and (first is None or e[0] <= first[0]))
    switch = next((s for s in client.switches if s[0] >= t_kill and s[1] == victim), None)
    out: dict[str, Any] = {
        "victim": victim,
        "t_kill": t_kill,
        "hb_age_ms": float(hb_age),
        "in_flight": in_flight,
        "ok": ok,
    }
    if first is not None:
        out["failover_ms"] = (first[0] - t_kill) * 1e3
        out["first_kind"] = first[3]
        # How late the tuples received right after the switch were, from when the source sent them.
        burst = [e for e in after if e[1] != victim and e[0] <= first[0] + 0.2]
        out["max_delay_ms"] = max((e[0] - sent_at(src, e[2])) * 1e3 for e in burst)
    if switch is not None:
        out["detect_ms"] = (switch[0] - t_kill) * 1e3
        if first is not None:
            out["switch_ms"] = (first[0] - switch[0]) * 1e3
    # Restart, and wait until the restarted replica is a ready partner again.
    t_restart = time.monotonic()
    services.start(role)
    topic = spec.topic(next(iter(spec.node_outputs(NODE))), victim)

    def ready() -> bool:
        if mon.state(NODE, 0, victim) is not NodeState.STABLE or mon.state(NODE, 0, 1 - victim) is not NodeState.STABLE:
            return False
        last = last_stable_id(bootstrap, topic, 0)
        return last is not None and last >= pv.last_stable

    out["restart_ok"] = _wait(ready, 90, 0.25)
    out["restart_s"] = time.monotonic() - t_restart
    seq_ok, n = _check_sequence(client)
    out.update(
        {
            "gaps": pv.gaps - gaps0,
            "duplicates_dropped": pv.duplicates - dups0,
            "sequence_ok": seq_ok,
            "stable_so_far": n,
        }
    )
    return out


def run_setting(label: str, hb_ms: int, timeout_ms: int, trials: int, bootstrap: str, steps: Steps) -> dict[str, Any]:
    """One deployment with these heartbeat settings, ``trials`` kills, then a final consistency check."""
    u = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="borealis-failover-"))
    path = tmp / "spec.yaml"
    path.write_text(spec_text(u, hb_ms, timeout_ms))
    spec = parse_spec(path.read_text(), str(path), path)
    provision(spec, bootstrap)
    services = ServiceProcesses(spec, path, bootstrap, tmp / "logs", coordinator=False)
    mon = ReplicaMonitor(bootstrap, spec.heartbeat_topic, timeout_ms / 1000)
    client = src = None
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        services.start()
        if not _wait(lambda: all(mon.state(NODE, 0, r) is NodeState.STABLE for r in range(2)), 90, 0.2):
            raise TimeoutError(f"replicas not STABLE within 90 s (logs in {tmp / 'logs'})")
        client = Client(spec, f"out_{u}", bootstrap)
        client.start()
        src = source(spec, f"in_{u}", bootstrap).start()
        _wait(lambda: len(client.events) > 2 * RATE, 60)  # two seconds of steady output
        for i in range(trials):
            r = trial(services, spec, client, src, bootstrap, hb_ms / 1000)
            rows.append(r)
            steps.advance(f"{label} trial {i + 1}/{trials}: {r.get('failover_ms', float('nan')):.0f} ms")
        src.stop()
        src.join(10)
        sent = len(src.sent_at)
        final_ok = _wait(lambda: len(client.view.stable(0)) >= sent, 60, 0.2)
        seq_ok, n = _check_sequence(client)
        # Steady-state latency (no kill in the 3 s before a tuple arrived) for comparison.
        kills = [r["t_kill"] for r in rows]
        base = [(t - sent_at(src, s)) * 1e3 for t, _, s, _ in client.events if not any(0 <= t - k < 3 for k in kills)]
        return {
            "label": label,
            "heartbeat_ms": hb_ms,
            "failure_timeout_ms": timeout_ms,
            "trials": rows,
            "sent": sent,
            "client_stable": n,
            "final_sequence_ok": final_ok and seq_ok and n == sent,
            "client_gaps": client.view.views[0].gaps,
            "client_duplicates_dropped": client.view.views[0].duplicates,
            "client_events": dict(client.kinds),
            "client_switches": len(client.switches),
            "steady_latency_p50_ms": statistics.median(base) if base else None,
            "elapsed_s": time.monotonic() - t0,
        }
    finally:
        if src is not None:
            src.stop()
        if client is not None:
            client.close()
        mon.close()
        services.stop()
        try:
            delete_topics(bootstrap, [t for t, _ in all_topics(spec)])
        except Exception:  # noqa: BLE001 - cleanup only
            pass


def _pct(vals: list[float], q: float) -> float:
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summarize(setting: dict[str, Any]) -> dict[str, Any]:
    """p50/p99/max of the failover time and of its parts, over the trials that completed."""
    out: dict[str, Any] = {}
    for key in ("failover_ms", "detect_ms", "switch_ms", "hb_age_ms", "max_delay_ms", "restart_s"):
        vals = [t[key] for t in setting["trials"] if key in t and t[key] == t[key]]
        if vals:
            out[key] = {
                "p50": _pct(vals, 0.5),
                "p99": _pct(vals, 0.99),
                "max": max(vals),
                "min": min(vals),
                "mean": statistics.fmean(vals),
                "n": len(vals),
            }
    later = [t["failover_ms"] for t in setting["trials"][1:] if "failover_ms" in t]
    if later:  # the client's first switch is a cold start (see the section)
        out["failover_after_first_ms"] = {"p50": _pct(later, 0.5), "p99": _pct(later, 0.99), "max": max(later)}
    # What detection should be: failure_timeout minus the heartbeat's age at the kill.
    resid = [
        t["detect_ms"] - (setting["failure_timeout_ms"] - t["hb_age_ms"])
        for t in setting["trials"]
        if "detect_ms" in t and t["hb_age_ms"] == t["hb_age_ms"]
    ]
    if resid:
        out["detect_minus_model_ms"] = {"p50": _pct(resid, 0.5), "max": max(resid)}
    out["all_ok"] = all(t["ok"] and t["restart_ok"] and t["sequence_ok"] and t["gaps"] == 0 for t in setting["trials"])
    return out


def run(quick: bool, progress: Progress | None) -> dict[str, Any]:
    from bench.borealis.common import broker, machine

    cfg = QUICK if quick else FULL
    t0 = time.monotonic()
    steps = Steps(progress, "failover: kill -9 the replica a client reads", cfg["trials"] * len(SETTINGS))
    with broker(log=steps.note) as facts:
        settings = []
        for label, hb, ft in SETTINGS:
            s = run_setting(label, hb, ft, cfg["trials"], facts["bootstrap"], steps)
            s["summary"] = summarize(s)
            settings.append(s)
        m = machine(facts)
    return {
        "name": NAME,
        "quick": quick,
        "machine": m,
        "paper": PAPER,
        "elapsed_s": time.monotonic() - t0,
        "settings": {
            "trials": cfg["trials"],
            "rate": RATE,
            "replicas": 2,
            "node": "1 node, pass-through filter",
            "client_check_interval_ms": 50,
            "checkpoint_interval_ms": 1000,
            "detection": [{"label": lb, "heartbeat_ms": hb, "failure_timeout_ms": ft} for lb, hb, ft in SETTINGS],
        },
        "results": settings,
    }


# -- report ----------------------------------------------------------------------------------------
def _footnote(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["settings"]
    return (
        f"1 node × 2 replicas (pass-through filter), 1 source at {s['rate']} tuples/s, client = StreamView; "
        f"{s['trials']} kill -9 trials per setting{' (quick run)' if result['quick'] else ''}.  Hardware: "
        f"{m.get('cores')} × {m.get('cpu')}, Python {m.get('python')}, Kafka {m.get('kafka')} ({m.get('broker')}); "
        "broker, replicas, source and client share the machine"
    )


def plot(result: dict[str, Any], docs_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8))
    colours = ["#2a7ab9", "#e08a2c", "#6aa84f"]
    for s, col in zip(result["results"], colours, strict=False):
        vals = sorted(t["failover_ms"] for t in s["trials"] if "failover_ms" in t)
        if not vals:
            continue
        ys = [(i + 1) / len(vals) for i in range(len(vals))]
        a.step(vals, ys, where="post", color=col, label=f"{s['label']}: p50 {_pct(vals, 0.5):.0f} ms")
        a.axvline(s["failure_timeout_ms"], color=col, ls=":", lw=1)
    a.set(
        xlabel="kill -9 → client's next tuple from the other replica (ms)",
        ylabel="fraction of trials",
        title="failover time seen by the client (CDF; dotted: failure_timeout)",
    )
    a.set_ylim(0, 1.02)
    a.grid(True, alpha=0.3)
    a.legend(fontsize=8, loc="lower right")
    labels = [s["label"] for s in result["results"]]
    parts = [
        ("last heartbeat's age at kill", "hb_age_ms", "#bbbbbb"),
        ("detection (kill → switch)", "detect_ms", "#2a7ab9"),
        ("switch → first tuple", "switch_ms", "#6aa84f"),
    ]
    x = range(len(labels))
    width = 0.25
    for j, (name, key, col) in enumerate(parts):
        vals = [s["summary"].get(key, {}).get("p50", 0) for s in result["results"]]
        bars = b.bar([i + (j - 1) * width for i in x], vals, width, label=name, color=col)
        for bar, v in zip(bars, vals, strict=True):
            b.annotate(
                f"{v:.0f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8
            )
    b.set_xticks(list(x), labels)
    b.set(ylabel="ms (median over trials)", title="where the time goes: detection ≈ failure_timeout − heartbeat age")
    b.legend(fontsize=8)
    title = "hastream failover: kill -9 of the replica a client reads (beyond the Borealis paper)"
    return [save_footnoted(fig, docs_dir / "borealis_failover.png", title, _footnote(result))]


def section(result: dict[str, Any]) -> str:
    s, m = result["settings"], result["machine"]
    rows = [fill(PAGE, "table")]
    for r in result["results"]:
        sm = r["summary"]
        f, d, sw, hb, md = (
            sm.get(k, {}) for k in ("failover_ms", "detect_ms", "switch_ms", "hb_age_ms", "max_delay_ms")
        )
        ok = fill(PAGE, "sequence-ok" if r["final_sequence_ok"] and sm["all_ok"] else "sequence-failed")
        rows.append(
            f"| {r['label']} | {f.get('p50', 0):.0f} ms | {f.get('p99', 0):.0f} ms | {f.get('max', 0):.0f} ms | "
            f"{d.get('p50', 0):.0f} ms | {sw.get('p50', 0):.0f} ms | {hb.get('p50', 0):.0f} ms | "
            f"{md.get('max', 0):.0f} ms | {sum(t['gaps'] for t in r['trials'])} | {ok} "
            f"({r['client_stable']:,} tuples) |"
        )
    restarts = ", ".join(
        fill(PAGE, "restart", seconds=f"{r['summary']['restart_s']['p50']:.1f}", label=r["label"])
        for r in result["results"]
        if "restart_s" in r["summary"]
    )
    return (
        fill(
            PAGE,
            "section",
            quick_flag=fill(PAGE, "quick-flag") if result["quick"] else "",
            cores=m.get("cores"),
            cpu=m.get("cpu"),
            python=m.get("python"),
            kafka=m.get("kafka"),
            elapsed=f"{result['elapsed_s']:.0f}",
            rate=s["rate"],
            trials=s["trials"],
            table="\n".join(rows),
            restarts=restarts,
            comparison=_comparison(result),
        )
        + "\n"
    )


def _comparison(result: dict[str, Any]) -> str:
    worst = max((t.get("max_delay_ms", 0) for r in result["results"] for t in r["trials"]), default=0)
    bullets = []
    for r in result["results"]:
        sm = r["summary"]
        if "failover_ms" not in sm or "detect_ms" not in sm:
            continue
        share = sm["detect_ms"]["p50"] / sm["failover_ms"]["p50"]
        resid = sm.get("detect_minus_model_ms", {}).get("p50", float("nan"))
        rest = [t["switch_ms"] for t in r["trials"][1:] if "switch_ms" in t]
        first = r["trials"][0].get("switch_ms") if r["trials"] else None
        first_switch = (
            fill(
                PAGE,
                "first-switch",
                first=f"{first:.0f}",
                later=f"{statistics.median(rest):.0f}",
                slowest=f"{sm['failover_after_first_ms']['max']:.0f}",
            )
            if first is not None and rest and first > 3 * statistics.median(rest) + 50
            else ""
        )
        bullets.append(
            fill(
                PAGE,
                "setting",
                label=r["label"],
                failover=f"{sm['failover_ms']['p50']:.0f}",
                share=f"{share:.0%}",
                residual=f"{resid:.0f}",
                first_switch=first_switch,
            )
        )
    bullets += [fill(PAGE, "bounded"), fill(PAGE, "burst", worst=f"{worst:.0f}")]
    return fill(PAGE, "comparison", paper=PAPER, bullets="\n".join(bullets))


def main(argv: list[str] | None = None) -> None:
    from bench.borealis.common import standalone

    standalone(
        NAME, __doc__, f"{QUICK['trials']} trials per setting instead of {FULL['trials']}", run, plot, section, argv
    )


if __name__ == "__main__":
    main()
