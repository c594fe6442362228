"""One run of an HA experiment on the real broker: a node under the coordinator, input at a steady
rate, kill -9 of its primary mid-run; what the failure cost and what the scheme cost before it.

- **Recovery time**: from the coordinator's election of the new primary (the takeover order
  decided: the epoch claim and the order's delivery are in it) to the pre-failure state: the new
  primary has dropped its replay and read its inputs up to where they ended when it took over
  (it logs "primary caught up"). **Detection** is from the kill to the election. The **outage** is
  measured at a client: the longest time after the kill in which no new stable result reached it.
- **Storage**: what the input logs hold at the kill (what the trims left) and, for passive
  standby, the image a takeover loads.
- **Overhead in bytes**, as the paper counts it: what the scheme sends besides the data
  (passive standby's checkpoints, the acks, active standby's trims and the second copy of the
  input its secondary reads) over the data the node reads and writes (records' keys, values
  and headers), both over the same failure-free stretch of the run.
- **Overhead in CPU**: both replicas' CPU seconds over that stretch (``/proc``), set beside an
  amnesia run's (whose secondary does nothing) by the experiment.
- **Precise**: the output after the failure equals the failure-free output, tuple for tuple.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from bench.harness import Recorder, ServiceProcesses, cpu_s, wait_primary
from bench.workload import PacedSources, readings_workload
from services.client.view import StreamView
from services.control.messages import Trim, decode_control
from services.control.monitor import ReplicaMonitor
from services.core.kafka import plain_consumer
from services.core.tuples import TupleType
from services.deploy.topics import provision
from services.ha.guarantee import NotRepeatingRecovery, first_copies, repeated_runs
from services.log.tail import stable_log
from services.operators.reference import evaluate
from services.spec import parse_spec

AGG = "count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)"


@dataclass(frozen=True)
class Config:
    scheme: str
    recovery: str = "precise"  # or rollback (amnesia: gap, whatever this says)
    interval_ms: int = 50  # M: checkpoints, acks, trims
    workload: str = "aggregate"  # filter | aggregate | union | chain
    window: int = 100  # ms of tuple time; at 1 tuple per ms, tuples
    advance: int = 10
    aggregates: int = 1  # the chain's length (workload "chain")
    sensors: int = 1  # distinct keys in the input
    rate: int = 1000  # tuples/s in all
    seconds: float = 10.0
    kill_at: float = 6.0  # s into the input
    heartbeat_ms: int = 50
    misses: int = 5  # detection about misses x heartbeat_ms: the paper's D = 250 ms
    bucket: int = 10  # ms: operator time moves by buckets, and a cut (an ack) needs a bucket start

    @property
    def label(self) -> str:
        rollback = " rollback" if self.recovery == "rollback" and self.scheme != "amnesia" else ""
        return f"{self.scheme}{rollback} M={self.interval_ms} {self.workload}"


def spec_text(c: Config, u: str) -> str:
    """One node, two replicas, under ``c.scheme``."""
    recovery = "" if c.scheme == "amnesia" else f" recovery: {c.recovery},"
    ha = (
        f"{{scheme: {c.scheme},{recovery} interval_ms: {c.interval_ms}, heartbeat_ms: {c.heartbeat_ms}, "
        f"misses: {c.misses}}}"
    )
    streams = [f"  in_{u}: {{schema: reading, key: sensor}}"]
    ops: list[str] = []
    if c.workload == "filter":
        streams.append(f"  out_{u}: {{schema: reading, key: sensor}}")
        ops.append(f'  f: {{type: filter, input: in_{u}, output: out_{u}, where: "seq >= 0"}}')
    elif c.workload == "union":
        streams += [f"  in2_{u}: {{schema: reading, key: sensor}}", f"  out_{u}: {{schema: reading, key: sensor}}"]
        ops.append(f"  u: {{type: union, inputs: [in_{u}, in2_{u}], output: out_{u}}}")
    else:  # aggregate, or a chain of them in the node: window, then back to readings for the next
        prev = f"in_{u}"
        for i in range(c.aggregates if c.workload == "chain" else 1):
            last = i == (c.aggregates if c.workload == "chain" else 1) - 1
            w = f"out_{u}" if last else f"w{i}_{u}"
            streams.append(f"  {w}: {{schema: window_stat, key: key}}")
            ops.append(
                f"  win{i}: {{type: window, input: {prev}, output: {w}, key: sensor, size: {c.window}, "
                f"slide: {c.advance}, aggregates: {{{AGG}}}}}"
            )
            if not last:
                back = f"r{i}_{u}"
                streams.append(f"  {back}: {{schema: reading, key: sensor}}")
                ops.append(
                    f"  back{i}: {{type: map, input: {w}, output: {back}, "
                    f"fields: {{sensor: key, ts: window_end, value: avg, seq: count}}}}"
                )
                prev = back
    names = [o.split(":")[0].strip() for o in ops]
    return "\n".join(
        [f"name: habench-{u}", "defaults: {partitions: 1}", f"dpc: {{bucket: {c.bucket}}}", "streams:", *streams]
        + ["operators:", *ops, "nodes:"]
        + [f"  n: {{operators: [{', '.join(names)}], replicas: 2, ha: {ha}}}", ""]
    )


def inputs(c: Config, u: str) -> list[str]:
    return [f"in_{u}", f"in2_{u}"] if c.workload == "union" else [f"in_{u}"]


def run(c: Config, bootstrap: str) -> dict[str, Any]:
    """One run; raises if the node does not come up or the takeover does not happen."""
    with tempfile.TemporaryDirectory(prefix="hastream-ha-") as tmp:
        try:
            return _run(c, bootstrap, Path(tmp))
        except Exception:
            kept = Path(tempfile.gettempdir()) / f"hastream-ha-failed-{os.urandom(3).hex()}"
            shutil.copytree(Path(tmp) / "logs", kept, dirs_exist_ok=True)
            raise RuntimeError(f"the run failed; its logs are kept in {kept}") from None


def _run(c: Config, bootstrap: str, tmp: Path) -> dict[str, Any]:
    u = os.urandom(4).hex()
    path = tmp / "spec.yaml"
    path.write_text(spec_text(c, u))
    spec = parse_spec(path.read_text(), str(path), path)
    provision(spec, bootstrap)
    logs = tmp / "logs"
    services = ServiceProcesses(spec, path, bootstrap, logs)
    services.start()
    procs = {r: services.procs[f"n.r{r}.p0"] for r in (0, 1)}
    mon = ReplicaMonitor(bootstrap, spec.heartbeat_topic, 1.0)
    names = inputs(c, u)
    per = c.rate // len(names)
    n = int(per * c.seconds)
    workload = readings_workload(names, n, per, sensors=c.sensors)
    recorder = Recorder(spec, bootstrap, [f"out_{u}"], wait_s=0.01)  # a client, reading as results come
    try:
        primary = wait_primary(mon, "n", None, 90)
        if c.scheme == "active_standby":  # the secondary must be following before the input starts
            _wait_log(logs / f"n.r{1 - primary}.p0.log", "secondary caught up", 60)
        sources = PacedSources(spec, bootstrap, workload, per).start()
        began = time.monotonic()
        time.sleep(2.0)  # steady state
        t0, cpu0, marks0 = time.time(), {r: cpu_s(p.pid) for r, p in procs.items()}, _marks(bootstrap, spec, names)
        time.sleep(max(0.0, began + c.kill_at - time.monotonic()))
        cpu1, t1, marks1 = {r: cpu_s(p.pid) for r, p in procs.items()}, time.time(), _marks(bootstrap, spec, names)
        services.kill(f"n.r{primary}.p0")
        killed, killed_mono = time.time(), time.monotonic()
        wait_primary(mon, "n", primary, 30)
        took = _wait_log(logs / f"n.r{1 - primary}.p0.log", "primary caught up in", 60, after=killed)
        elected, _ = _wait_log(logs / "coordinator.log", f"n/p0/r{1 - primary} is elected", 10, after=killed)
        sources.join(120)
        want = _failure_free(spec, workload, names, u)
        with StreamView(spec, f"out_{u}", bootstrap, stable_only=True) as view:
            view.read_until(lambda v: bool(v.stable(0)) and v.stable(0)[-1] == want[-1], 60)
            time.sleep(0.5)
            view.poll(timeout=0.5)
            got = view.stable(0)
        caught, ms = took
        outage = client_outage(recorder.replica(f"out_{u}", 0).messages, killed_mono, killed_mono + caught - killed)
        stored = [(tid, (stime, kv)) for tid, stime, kv in stable_log(bootstrap, spec.topic(f"out_{u}"), 0)]
        repeated = _repeated(stored, len(want))
        promoted = _log_time(logs / f"n.r{1 - primary}.p0.log", "primary at epoch", after=killed)
        window = (int(t0 * 1000), int(t1 * 1000))
        size = {s: _record_size(bootstrap, spec.topic(s)) for s in names}
        read = sum((marks1[s][1] - marks0[s][1]) * size[s] for s in names)
        data = int(read) + _bytes(bootstrap, spec.topic(f"out_{u}"), window)
        extra = _ha_bytes(c, spec, bootstrap, window) + (int(read) if c.scheme == "active_standby" else 0)
        cpu = {r: round(cpu1[r] - cpu0[r], 3) for r in procs}
        images = _images(bootstrap, spec, window) if c.scheme == "passive_standby" else None
        return {
            "config": asdict(c),
            "label": c.label,
            "detection_s": round(elected - killed, 3),
            "promoted_s": round(promoted - killed, 3),  # kill to the new primary's log of its promotion
            "recovery_ms": round(1000 * (caught - elected)),
            "node_recovery_ms": ms,  # from the order's arrival at the node, by its own clock
            "recovered_s": round(caught - killed, 3),
            "outage_s": outage,
            "input_kept_bytes": round(sum((marks1[s][1] - marks1[s][0]) * size[s] for s in names)),
            "data_bytes": data,
            "ha_bytes": extra,
            "overhead_pct": round(100 * extra / data, 2) if data else None,
            "image_bytes": images,  # passive standby: the mean image (the whole state) written meanwhile
            "images_only_pct": (
                round(100 * images * (t1 - t0) * 1000 / c.interval_ms / data, 2) if images and data else None
            ),  # what an image at every checkpoint would have cost
            "cpu_primary_s": cpu[primary],
            "cpu_secondary_s": cpu[1 - primary],
            "span_s": round(t1 - t0, 2),
            "precise": got == want and repeated == 0,  # the log itself: each tuple once
            "client_exact": got == want,  # what a client reads, which drops an id it has
            "duplicates": repeated,  # tuples the log holds twice (rollback); None: not repeating
            "results": len(want),
            "received": len(got),
        }
    finally:
        recorder.close()
        mon.close()
        services.stop()


def client_outage(messages: list[Any], killed: float, caught: float) -> float | None:
    """The longest time, from ``killed`` until the new primary ``caught`` up (both monotonic), in
    which a client received no stable result it had not received before (None: none came after
    the kill). Results the old primary wrote just before the kill may reach the client just after
    it; the silence that follows them is the outage, not the time to them."""
    seen, new = -1, []
    for m in messages:
        if m.type is TupleType.STABLE and m.id > seen:
            seen = m.id
            new.append(m.at)
    gaps = [b - a for a, b in pairwise([killed, *(t for t in new if t >= killed)]) if a <= caught]
    return round(max(gaps), 3) if gaps else None


def _repeated(stored: list[tuple[int, Any]], results: int) -> int | None:
    """How many tuples the log holds again, if it is repeating with all ``results`` (else None)."""
    try:
        runs = repeated_runs(stored)
    except NotRepeatingRecovery:
        return None
    return sum(len(r) for r in runs) if len(first_copies(stored)) == results else None


def _failure_free(spec: Any, workload: dict[str, list[Any]], names: list[str], u: str) -> list[Any]:
    """The failure-free output in hastream's order: a union merges its inputs in tuple-time order,
    input by input where times are equal (SUnion's), which the reference evaluation leaves open."""
    if len(names) == 1:
        return evaluate(spec, {s: [workload[s]] for s in names}, ended=True)[f"out_{u}"][0]
    merged = sorted((r["ts"], port, i) for port, s in enumerate(names) for i, r in enumerate(workload[s]))
    return [workload[names[port]][i] for _, port, i in merged]


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")


def _log_line(path: Path, needle: str, after: float) -> tuple[float, str] | None:
    """(wall time, line) of the first log line with ``needle`` stamped at or after ``after``."""
    for line in path.read_text(errors="replace").splitlines() if path.exists() else ():
        if needle in line and (m := _STAMP.match(line)):
            t = dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.UTC).timestamp()
            if t >= after:
                return t, line
    return None


def _log_time(path: Path, needle: str, after: float = 0.0) -> float:
    """Wall time of the first log line with ``needle`` at or after ``after`` (nan if none)."""
    hit = _log_line(path, needle, after)
    return hit[0] if hit else float("nan")


def _wait_log(path: Path, needle: str, timeout: float, after: float = 0.0) -> tuple[float, int]:
    """(wall time, the number after ``needle``) of the first such log line after ``after``, once written."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hit = _log_line(path, needle, after)
        if hit:
            num = re.search(re.escape(needle) + r" (\d+)", hit[1])
            return hit[0], int(num.group(1)) if num else 0
        time.sleep(0.05)
    raise TimeoutError(f"no '{needle}' in {path.name} after {timeout:.0f} s")


def _records(bootstrap: str, topic: str) -> list[Any]:
    c = plain_consumer(bootstrap, "habench")
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        if hi <= lo:
            return []
        c.assign([TopicPartition(topic, 0, lo)])
        out: list[Any] = []
        while len(out) < hi - lo:
            batch = c.consume(1000, 2.0)
            if not batch:
                break
            out += [m for m in batch if m.error() is None]
        return out
    finally:
        c.close()


def _size(m: Any) -> int:
    return len(m.key() or b"") + len(m.value() or b"") + sum(len(k) + len(v or b"") for k, v in m.headers() or ())


def _bytes(bootstrap: str, topic: str, window: tuple[int, int], keep: Any = None) -> int:
    """Bytes of the records of ``topic`` written within ``window`` (ms) that ``keep`` accepts."""
    lo, hi = window
    return sum(
        _size(m) for m in _records(bootstrap, topic) if lo <= m.timestamp()[1] < hi and (keep is None or keep(m))
    )


def _marks(bootstrap: str, spec: Any, names: list[str]) -> dict[str, tuple[int, int]]:
    """Each input log's start and end offsets now: the trims move the start, so what was read is
    counted by the end, and what a scheme keeps is the span."""
    c = plain_consumer(bootstrap, "habench")
    try:
        return {s: c.get_watermark_offsets(TopicPartition(spec.topic(s), 0), timeout=10) for s in names}
    finally:
        c.close()


def _record_size(bootstrap: str, topic: str) -> float:
    """The mean size of the records still in ``topic`` (the inputs' records are all alike)."""
    ms = _records(bootstrap, topic)
    return sum(_size(m) for m in ms) / len(ms) if ms else 0.0


def _images(bootstrap: str, spec: Any, window: tuple[int, int]) -> int | None:
    """The mean size of the passive standby images written within ``window`` (ms), from their
    manifests (``services.node.restart``), or of the last one before if none was."""
    lo, hi = window
    sizes = [
        (m.timestamp()[1] >= lo, json.loads(m.value())["size"])
        for m in _records(bootstrap, spec.restart_topic("n", 0))
        if m.key() == b"p0" and m.value() and m.timestamp()[1] < hi
    ]
    within = [size for inside, size in sizes if inside]
    return round(sum(within) / len(within)) if within else (sizes[-1][1] if sizes else None)


def _ha_bytes(c: Config, spec: Any, bootstrap: str, window: tuple[int, int]) -> int:
    """What the scheme sent besides the data within ``window`` (active standby's second copy of the
    input aside)."""
    if c.scheme == "passive_standby":
        return _bytes(bootstrap, spec.restart_topic("n", 0), window)
    total = 0
    if c.scheme in ("upstream_backup", "active_standby"):
        total += _bytes(bootstrap, spec.acks_topic, window)
    if c.scheme == "active_standby":

        def trim(m: Any) -> bool:
            try:
                return isinstance(decode_control(m.value()), Trim)
            except Exception:  # noqa: BLE001 - not a control message of this kind
                return False

        total += _bytes(bootstrap, spec.control_topic, window, trim)
    return total
