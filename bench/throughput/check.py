"""Reading the output topics back and checking them: a failure-free run's output (no TENTATIVE,
UNDO or REC_DONE tuple, dense STABLE ids), and every processor's results equal to the node's."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TopicPartition

from bench.workload import WINDOW_SIZE_MS
from services.core.codec import codec_for
from services.core.errors import HeaderError
from services.core.tuples import read_headers
from services.log.tail import range_consumer, read_range

NOT_RESULTS = ("TENTATIVE", "UNDO", "REC_DONE")
DATA = "DATA"  # a peer's (or the Avro loop's) output record: no ht header
RESULTS_TYPES = ("STABLE", DATA)  # must never appear in a failure-free node's output


@dataclass
class OutMsg:
    append_ms: int
    type: str  # the ht header's TYPE
    id: int
    stime: int
    value: bytes | None


def read_topic(bootstrap: str, topic: str) -> list[OutMsg]:
    """Every message of partition 0 of ``topic``, in log order, with its broker append time and type
    (a peer writing in transactions, Quix's exactly-once: its committed records; ``read_range`` passes
    the markers)."""
    c = range_consumer(bootstrap, "bench.read")
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        out: list[OutMsg] = []
        for m in read_range(c, topic, 0, low, high):
            ttype, ts = m.timestamp()
            if ttype != TIMESTAMP_LOG_APPEND_TIME:
                raise RuntimeError(f"{topic} has timestamp type {ttype}, expected LogAppendTime")
            try:
                if m.headers() is None:  # a peer's result: a plain record
                    out.append(OutMsg(ts, DATA, -1, -1, m.value()))
                else:
                    t, tid, stime, _ = read_headers(m.headers())
                    out.append(OutMsg(ts, t.value, tid, stime, m.value()))
            except HeaderError:
                out.append(OutMsg(ts, "?", -1, -1, m.value()))
        return out
    finally:
        c.close()


@dataclass
class OutputCheck:
    """What a run wrote: message counts by tuple type, and whether the stable ids are dense."""

    types: dict[str, int] = field(default_factory=dict)
    stable: int = 0
    dense: bool = True
    last_append_ms: int | None = None

    @property
    def not_results(self) -> int:
        return sum(self.types.get(t, 0) for t in NOT_RESULTS)


def check_output(label: str, msgs: list[OutMsg], deadlettered: int = 0) -> OutputCheck:
    """Count the output by type; fail on anything a failure-free run must not write.

    Results are the STABLE data tuples (ids 0, 1, 2, ... in log order); BOUNDARY tuples are
    control. A TENTATIVE tuple (and the UNDO/REC_DONE that would follow) means SUnion gave up
    waiting for a boundary: the input lacked boundaries, and the figures would be wrong.
    """
    types = Counter(m.type for m in msgs)
    ids = [m.id for m in msgs if m.type == "STABLE"]
    results = len(ids) + types.get(DATA, 0)
    chk = OutputCheck(dict(types), results, ids == list(range(len(ids))), msgs[-1].append_ms if msgs else None)
    problems = []
    if chk.not_results:
        problems.append(", ".join(f"{types[t]} {t}" for t in NOT_RESULTS if types.get(t)))
    if not chk.dense:
        problems.append("STABLE ids are not 0, 1, 2, ... in order")
    if deadlettered:
        problems.append(f"{deadlettered} input messages dead-lettered")
    if problems:
        raise RuntimeError(
            f"{label}: output not failure-free ({'; '.join(problems)}): were the input's boundaries missing?"
        )
    return chk


def compare_outputs(bootstrap: str, topics: dict[str, str]) -> dict[str, Any]:
    """Decode the results each processor wrote and check they are the hastream nodes' own: the Avro
    loop's and Quix's filter+map record for record, Quix's windows each equal to hastream's (Quix
    leaves the windows of the last event times open, having no end-of-input; hastream's final
    boundary closes them). Raises on any difference, so no figure is quoted for unequal work."""

    def results(p: str, schema: str) -> list[dict[str, Any]]:
        codec = codec_for(schema)
        return [codec.decode(m.value) for m in read_topic(bootstrap, topics[p]) if m.type in RESULTS_TYPES]

    fm = results("filter+map", "reading")
    done: dict[str, Any] = {"filter+map": {"records": len(fm), "equal": []}}
    for p in ("avro", "quix filter+map"):
        if p in topics:
            got = results(p, "reading")
            if got != fm:
                at = next((i for i, (a, b) in enumerate(zip(got, fm, strict=False)) if a != b), min(len(got), len(fm)))
                raise RuntimeError(f"{p}: {len(got)} results differ from the filter+map node's {len(fm)} at #{at}")
            done["filter+map"]["equal"].append(p)
    if "quix window" in topics:
        want = {(r["key"], r["window_start"]): r for r in results("window", "window_stat")}
        got = results("quix window", "window_stat")
        for r in got:
            w = want.get((r["key"], r["window_start"]))
            if w is None or not _same_window(r, w):
                raise RuntimeError(f"quix window: {r} is not the window node's {w}")
        last_end = max(w["window_end"] for w in want.values())
        open_at_end = [k for k in want.keys() - {(r["key"], r["window_start"]) for r in got}]
        if any(want[k]["window_end"] <= last_end - 2 * WINDOW_SIZE_MS for k in open_at_end):
            raise RuntimeError("quix window: windows missing before the input's last event times")
        done["window"] = {"records": len(want), "equal": ["quix window"], "quix_open_at_end": len(open_at_end)}
    return done


def _same_window(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        a["window_end"] == b["window_end"]
        and a["count"] == b["count"]
        and all(math.isclose(a[f], b[f], rel_tol=1e-9, abs_tol=1e-9) for f in ("sum", "avg", "min", "max"))
    )
