"""The state stores side by side in a running node (Fig. 5 and the rivals): the same count window, the
same pre-loaded input, one node process per run, each method a spec setting of the same code path.

- ``none``: no recovery point at all (restart images every hour: none in a run), the baseline;
- ``snapshot``: a whole restart image every second (hastream's periodic full snapshot);
- ``cec_open``: CEC with CEC_OPEN only (Q and U never exceeded): the paper's Fig. 5;
- ``cec``: CEC at the paper's default intensity (Q = 1,000, U = 1,000,000, CI 5 ms, CP 100 ms);
- ``changelog``: each part the input changed, whole, after every run, and a tombstone when it closes,
  in a compacted topic (Kafka Streams' and Quix's state stores).

Each run measures throughput (from the node going on to its last result's append time), the node's CPU
per input tuple, and the bytes written to the output and restart topics, and checks the output equals
the reference evaluation. The workloads are Fig. 5's: 2 keys, windows of 1 tuple (fast: each tuple opens
and closes one) or of 1,000 (slow). A repeat runs every method once, back to back, each repeat in an
order rotated by one (a later run in a repeat meets a broker with more topics behind it), and a
method's ratio to ``none`` is the median of its per-repeat ratios.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import TopicPartition

from bench.exchange.runs import Deployed, preload, throughput_run, wait_output
from services.cec.intensity import NEVER
from services.client.workload import located
from services.log.tail import range_consumer, read_range
from services.operators.reference import evaluate

METHODS = {
    "none": "checkpoint: {method: restart_images}",
    "snapshot": "checkpoint: {method: restart_images}",
    "cec_open": f"checkpoint: {{method: cec, q: {NEVER}, u: {NEVER}}}",
    "cec": "checkpoint: {method: cec}",
    "changelog": "checkpoint: {method: changelog}",
}
IMAGE_MS = {"none": 3_600_000, "snapshot": 1000}  # restart_image_interval
SHAPES = {"fast": 1, "slow": 1000}  # Fig. 5's count windows (tuples), over 2 keys
KEYS = 2


def spec_text(name: str, method: str, count: int) -> str:
    """One count window of ``count`` per sensor, reading the source, in one partition."""
    return f"""\
name: {name}
dpc: {{delay: 60000, restart_image_interval: {IMAGE_MS.get(method, 3_600_000)}}}
streams:
  readings: {{schema: located, key: sensor}}
  stats: {{schema: window_stat, key: key}}
operators:
  win: {{type: window, input: readings, output: stats, key: sensor, count: {count},
        aggregates: {{count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}}}
nodes:
  win: {{operators: [win], {METHODS[method]}}}
"""


def topic_bytes(bootstrap: str, topic: str) -> int:
    """Bytes of every record of partition 0 of ``topic``: values, keys and headers."""
    c = range_consumer(bootstrap, "bench.cec")
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        n = 0
        for m in read_range(c, topic, 0, low, high):
            n += len(m.value() or b"") + len(m.key() or b"")
            headers: Any = m.headers() or ()
            n += sum(len(k) + len(v or b"") for k, v in headers)
        return n
    finally:
        c.close()


def one_run(bootstrap: str, scratch: Path, name: str, method: str, count: int, n: int) -> dict[str, Any]:
    """One method on one workload: ``throughput_run``'s figures and the bytes it wrote."""
    text = spec_text(name, method, count)
    written: dict[str, int] = {}

    def written_by(dep: Any) -> None:
        written["output"] = topic_bytes(bootstrap, dep.spec.topic("stats"))
        written["restart"] = topic_bytes(bootstrap, dep.spec.restart_topic("win", 0))

    res = throughput_run(bootstrap, scratch, text, n, sensors=KEYS, before_close=written_by)
    return {**res, **written, "method": method}


def compare(
    bootstrap: str, scratch: Path, n: int, repeats: int, tick: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """Every method on every shape, ``repeats`` times: the runs, and per shape and method the medians
    and the ratios to ``none``."""
    out: dict[str, Any] = {"tuples": n, "repeats": repeats, "shapes": {}}
    for shape, count in SHAPES.items():
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}
        names = list(METHODS)
        for r in range(repeats):
            for m in names[r % len(names) :] + names[: r % len(names)]:  # each repeat starts one method later
                runs[m].append(one_run(bootstrap, scratch, f"cecm-{shape}-{m}-{r}", m, count, n))
                tick()
        out["shapes"][shape] = {
            "window": count,
            "methods": {m: _summary(rs, runs["none"]) for m, rs in runs.items()},
        }
    return out


def _summary(rs: list[dict[str, Any]], base: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tuples_per_s": statistics.median(r["tuples_per_s"] for r in rs),
        "runs_tuples_per_s": [round(r["tuples_per_s"]) for r in rs],
        "ratio": statistics.median(r["tuples_per_s"] / b["tuples_per_s"] for r, b in zip(rs, base, strict=True)),
        "cpu_us": statistics.median(r["cpu_us"] for r in rs),
        "output_mb": statistics.median(r["output"] for r in rs) / 1e6,
        "restart_mb": statistics.median(r["restart"] for r in rs) / 1e6,
        "equal": all(r["equal"] for r in rs),
    }


# The recovery comparison's workload: large state (the paper's Figs. 6-7 shape, scaled: count windows of
# 10 over many keys, so thousands of windows are open at the crash).
RECOVERY_KEYS, RECOVERY_COUNT = 10_000, 10


def recovery_run(bootstrap: str, scratch: Path, name: str, method: str, n: int) -> dict[str, Any]:
    """kill -9 of the node halfway through ``n`` pre-loaded readings, restarted at once (as its supervisor
    does): the time from the kill until the last result is out, against the same run without the kill
    (measured before it on a fresh deployment), and whether the output equals the reference."""
    text = spec_text(name, method, RECOVERY_COUNT)
    calm = throughput_run(bootstrap, scratch, text.replace(name, name + "c"), n, sensors=RECOVERY_KEYS)
    dep = Deployed(bootstrap, text.replace(name, name + "k"), scratch)
    try:
        recs = list(located(n, sensors=RECOVERY_KEYS, step_ms=2, seed=5))
        dep.hold(True)
        inputs = preload(dep.spec, bootstrap, "readings", recs)
        want = [len(w) for w in evaluate(dep.spec, {"readings": inputs}, ended=True)["stats"]]
        went_on = time.time()  # the broker's LogAppendTime is this machine's clock
        dep.hold(False)
        wait_output(dep, "stats", [w // 2 for w in want])
        role = next(iter(dep.procs.procs))
        killed = time.time()
        dep.procs.kill(role)
        dep.procs.start(role)
        got = wait_output(dep, "stats", want)
        done = max(g[-1][0] for g in got if g) / 1000  # the last result's append time
        equal = [[r for _, r in g] for g in got] == evaluate(dep.spec, {"readings": inputs}, ended=True)["stats"]
        calm_s = n / calm["tuples_per_s"]
        return {
            "method": method,
            "kill_to_done_s": done - killed,
            "total_s": done - went_on,
            "calm_s": calm_s,
            "lost_s": done - went_on - calm_s,
            "equal": equal and calm["equal"],
        }
    finally:
        dep.close()
