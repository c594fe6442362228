"""A long run of each HA scheme at a steady rate: does memory stay flat and do the logs stay bounded?

    python -m bench.ha_soak [--minutes 10] [--rate 1000] [--only passive_standby,...]

Per scheme, a sliding-window node of two replicas under the coordinator reads a source at
``--rate`` readings/s for ``--minutes``; nothing fails. Every ``--every`` seconds it samples each
replica's resident memory (``/proc/<pid>/status`` VmRSS) and how many records each of the node's
logs holds (end offset minus start offset: the input log, the output log, the checkpoint topic,
the acks topic), as the coordinator trims them. Flat means the memory of the last half of the run
grows by no more than its spread; bounded means the input and output logs hold about the
state's span plus an interval, not everything sent. Results go to ``bench/results/ha_soak.json``
(``--only`` replaces just those schemes' runs), the figure to ``docs/ha_soak.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from rich.console import Console
from rich.table import Table

from bench.borealis.common import DOCS, broker, machine, pyplot, save_figure
from bench.harness import ServiceProcesses, wait_primary
from bench.workload import PacedSources
from services.client.workload import readings
from services.control.monitor import ReplicaMonitor
from services.core.kafka import plain_consumer
from services.core.paths import REPO_ROOT
from services.deploy.topics import provision
from services.spec import Spec, parse_spec
from services.spec.topics import restart_topics

RESULTS = REPO_ROOT / "bench" / "results" / "ha_soak.json"
FIGURE = DOCS / "ha_soak.png"
SCHEMES = ("passive_standby", "active_standby", "upstream_backup")
SPEC = """\
name: soak-{scheme}-{u}
defaults: {{partitions: 1}}
streams:
  readings: {{schema: reading, key: sensor}}
  stats: {{schema: window_stat, key: key}}
operators:
  win: {{type: window, input: readings, output: stats, key: sensor, size: 1000, slide: 100,
        aggregates: {{count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}}}
nodes:
  n: {{operators: [win], replicas: 2, ha: {{scheme: {scheme}, recovery: precise, interval_ms: 100}}}}
"""
console = Console(highlight=False)


def rss_mb(pid: int) -> float | None:
    """The process's resident memory in MiB, or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def held(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Records each topic's partition 0 holds now (end minus start offset)."""
    c = plain_consumer(bootstrap, "soak")
    try:
        out = {}
        for t in topics:
            low, high = c.get_watermark_offsets(TopicPartition(t, 0), timeout=10)
            out[t] = high - low
        return out
    finally:
        c.close()


def soak(scheme: str, bootstrap: str, minutes: float, rate: int, every_s: float, work: Path) -> dict[str, Any]:
    """One scheme's run: samples of (seconds, per-replica RSS, per-log records held)."""
    text = SPEC.format(scheme=scheme, u=int(time.time()) % 100000)
    spec: Spec = parse_spec(text)
    path = work / f"{spec.name}.yaml"
    path.write_text(text)
    provision(spec, bootstrap)
    procs = ServiceProcesses(spec, path, bootstrap, work / spec.name)
    procs.start()
    logs = [spec.topic("readings"), spec.topic("stats")] + [t for t, _ in restart_topics(spec)]
    logs += [spec.acks_topic] if any(nd.ha.scheme.acks for nd in spec.nodes.values()) else []
    mon = ReplicaMonitor(bootstrap, spec.heartbeat_topic, 2.0)
    samples: list[dict[str, Any]] = []
    try:
        wait_primary(mon, "n", None, 90)
        seconds = minutes * 60
        sources = PacedSources(spec, bootstrap, {"readings": readings(int(rate * seconds), seed=1)}, rate).start()
        began = time.monotonic()
        while (t := time.monotonic() - began) < seconds:
            rss = {r: rss_mb(procs.procs[r].pid) for r in procs.procs if r != "coordinator"}
            samples.append({"t": round(t, 1), "rss_mb": rss, "held": held(bootstrap, logs)})
            console.print(f"  {scheme} {t:5.0f} s  rss {fmt_rss(rss)}  held {samples[-1]['held']}")
            time.sleep(every_s)
        sources.stop()
    finally:
        mon.close()
        procs.stop()
    return {"scheme": scheme, "rate": rate, "minutes": minutes, "samples": samples}


def fmt_rss(rss: dict[str, float | None]) -> str:
    return ", ".join(f"{r} {v:.0f} MiB" if v is not None else f"{r} gone" for r, v in sorted(rss.items()))


def verdict(run: dict[str, Any]) -> dict[str, Any]:
    """Per replica: median RSS of the second quarter and of the last quarter, and their difference; per
    log: the most it held in the last half and what the run sent."""
    samples = run["samples"]
    n = len(samples)
    q2, q4 = samples[n // 4 : n // 2], samples[3 * n // 4 :]
    out: dict[str, Any] = {"rss": {}, "held": {}}
    for r in samples[0]["rss_mb"]:
        early = [s["rss_mb"][r] for s in q2 if s["rss_mb"][r] is not None]
        late = [s["rss_mb"][r] for s in q4 if s["rss_mb"][r] is not None]
        if early and late:
            spread = statistics.pstdev(early + late)
            e, lt = statistics.median(early), statistics.median(late)
            out["rss"][r] = {"early_mb": e, "late_mb": lt, "growth_mb": lt - e, "spread_mb": spread}
    for log in samples[0]["held"]:
        out["held"][log] = {"max_late": max(s["held"][log] for s in samples[n // 2 :]), "end": samples[-1]["held"][log]}
    out["sent"] = int(run["rate"] * run["minutes"] * 60)
    return out


def report(runs: list[dict[str, Any]]) -> None:
    t = Table(title="HA soak: memory and logs over the run (no failure)")
    for c in (
        "scheme",
        "replica",
        "RSS 2nd quarter",
        "RSS last quarter",
        "growth",
        "spread",
        "logs held at most (last half)",
    ):
        t.add_column(c)
    for run in runs:
        v = verdict(run)
        logs = ", ".join(f"{k.rsplit('.', 1)[-1]} {h['max_late']}" for k, h in v["held"].items())
        for r, m in v["rss"].items():
            t.add_row(
                run["scheme"],
                r,
                f"{m['early_mb']:.1f} MiB",
                f"{m['late_mb']:.1f} MiB",
                f"{m['growth_mb']:+.1f} MiB",
                f"{m['spread_mb']:.1f}",
                f"{logs} (of {v['sent']} sent)",
            )
    console.print(t)


def plot(runs: list[dict[str, Any]], facts: dict[str, Any]) -> Path:
    plt = pyplot()
    fig, (mem, logs) = plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        ts = [s["t"] / 60 for s in run["samples"]]
        for r in run["samples"][0]["rss_mb"]:
            mem.plot(ts, [s["rss_mb"][r] for s in run["samples"]], label=f"{run['scheme']} {r}")
        readings_log = next(k for k in run["samples"][0]["held"] if k.endswith(".readings"))
        logs.plot(ts, [s["held"][readings_log] for s in run["samples"]], label=f"{run['scheme']} input log")
    mem.set(xlabel="minutes", ylabel="resident memory (MiB)", title="each replica's memory")
    logs.set(xlabel="minutes", ylabel="records held", title="the input log as the coordinator trims it")
    mem.legend(fontsize=6)
    logs.legend(fontsize=6)
    title = (
        f"{runs[0]['rate']} readings/s, window 1 s sliding by 100 ms; {facts.get('cores')} cores, {facts.get('cpu')}"
    )
    return save_figure(fig, FIGURE, title)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.ha_soak", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--every", type=float, default=15.0, help="seconds between samples")
    ap.add_argument("--only", default=",".join(SCHEMES), help="schemes to run; the others keep their runs on file")
    args = ap.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SCHEMES)
    if unknown:
        ap.exit(2, f"error: unknown scheme(s) {', '.join(sorted(unknown))} (known: {', '.join(SCHEMES)})\n")
    runs = []
    with broker(console.print) as facts, tempfile.TemporaryDirectory(prefix="hastream-soak-") as work:
        for scheme in args.only.split(","):
            console.print(f"[bold]{scheme}[/]: {args.minutes:g} min at {args.rate}/s")
            runs.append(soak(scheme, facts["bootstrap"], args.minutes, args.rate, args.every, Path(work)))
        facts = {**facts, **machine(facts)}
    ran = {r["scheme"] for r in runs}
    kept = json.loads(RESULTS.read_text())["runs"] if RESULTS.exists() else []
    runs = sorted(runs + [r for r in kept if r["scheme"] not in ran], key=lambda r: SCHEMES.index(r["scheme"]))
    RESULTS.write_text(json.dumps({"machine": facts, "runs": runs}, indent=1))
    report(runs)
    console.print(f"figure: {plot(runs, facts)}")


if __name__ == "__main__":
    main()
