"""Checkpoint/redo versus undo/redo (Borealis DPC, SIGMOD 2005, section "Reconciliation"), in process.

    python -m bench.borealis.reconcile [--quick]

The paper compares the two ways a node gets back to its pre-failure state before it redoes
the stable version of its input: copy the state back from a checkpoint, or rebuild it by
replaying the operators' input log up to the stream markers. This measures the same
trade-off on hastream's own ``NodePipeline`` (what ``NodeService._enter_failure`` and
``_reconcile`` call), without Kafka, so the figures are deterministic CPU costs:

* reconciliation time versus state size S (few tuples to redo), and versus the number of
  tuples to redo D (small state): checkpoint/redo is ``restore(snapshot)`` + redo D,
  undo/redo is ``undo()`` (clear, replay the log back to the markers) + redo D;
* the failure-free cost of each: a ``snapshot()`` per checkpoint (hastream persists one
  every ``dpc.checkpoint_interval``), and the input logging of ``NodePipeline(undo=True)``
  against ``undo=False`` per tuple;
* the failure-free cost of SUnion and SOutput beside the operators (``bench/dpc_cost.py``).

Two stateful operators, with input event time advancing 1 ms per tuple (so a window of W ms
holds W tuples):

* ``join`` (the paper's workload): a windowed equi-join of two inputs, ``within`` = S ms,
  S/2 keys so each tuple matches about one on the other side. Its state is S tuples; its
  stream markers reach back S tuples, so undo replays S tuples: the paper's assumption.
* ``window``: a keyed sliding aggregate (size S ms, slide S/4, S/20 keys). Undo replays the
  ~S input tuples of the oldest open window, but the state a checkpoint copies is only the
  accumulators (windows x keys, about S/5).

Inputs come in runs of ``RUN`` tuples of one input, as SUnion hands them to the operators.
Times are ``time.perf_counter`` medians over repeats, after a ``gc.collect()``; the cyclic
GC stays on, as in a node. Not included (the same for both methods): ``SUnion.redo()``
sorting the kept buckets, SOutput numbering the redo output, and producing it to Kafka.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypedDict

from rich.progress import Progress

from bench.borealis.common import fill, host, pyplot, save_footnoted
from services.node.pipeline import NodePipeline
from services.operators.base import Item
from services.operators.join import WindowJoin
from services.operators.window import WindowAggregate
from services.spec import Spec, parse_spec
from services.spec.plan import plan_node

NAME = "reconcile"
PAGE = "reconcile"  # docs/templates/reconcile.md: the section's text
RUN = 50  # tuples per run of one input
CHECKPOINT_INTERVAL_MS = 2000  # hastream's default dpc.checkpoint_interval
REF_RATE = 10_000  # tuples/s for the per-tuple overhead figures (a 10 s window then holds 100k tuples)
REF_STATE = 100_000
FEED_RUN = 5_000  # tuples per timed run when measuring the failure-free feed cost


class Sweep(TypedDict):
    """What one run measures: state sizes, tuples to redo, repeats."""

    sizes: list[int]
    redo_state: int
    redo: list[int]
    failure_tuples: int
    repeat: int
    feed_pairs: int
    dpc_cost_tuples: int


QUICK: Sweep = {
    "sizes": [1_000, 10_000, 100_000],
    "redo_state": 1_000,
    "redo": [1_000, 10_000, 50_000],
    "failure_tuples": 1_000,
    "repeat": 3,
    "feed_pairs": 20,
    "dpc_cost_tuples": 20_000,
}
FULL: Sweep = {
    "sizes": [1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000],
    "redo_state": 1_000,
    "redo": [1_000, 3_000, 10_000, 30_000, 100_000],
    "failure_tuples": 1_000,
    "repeat": 5,
    "feed_pairs": 40,
    "dpc_cost_tuples": 200_000,
}

# The paper's setup and findings (SIGMOD 2005, sections 6 and 6.3). The repository's copy of the
# paper (shared/papers/borealis-dpc-sigmod05.txt) lost its digits in extraction, so only what
# survives without them is quoted here.
PAPER = {
    "setup": "one Borealis node on a Pentium IV (single-node experiments), query network = SUnion, "
    "a join, SOutput; reconciliation after a failure of duration D at aggregate rate λ",
    "model_checkpoint": "Delay_new = P + S·p_copy + (D + L/2)·λ·p_proc",
    "model_undo": "Delay_new = P + S·(p_comp + p_proc) + (D + L/2)·λ·(p_comp + p_proc)",
    "findings": [
        "for both approaches the time to reconcile increases linearly with S and with Dλ",
        "undo/redo takes longer, primarily because it must rebuild the state (S·p_proc) rather than recopy it (S·p_copy)",
        "even at a small state checkpoint/redo wins: it checkpoints right before the failure, undo/redo replays "
        "from stream markers set only when the join processes tuples",
        "in theory checkpoints cost more CPU than computing stream markers, but checkpointing only when a failure "
        "starts (L = 0) removes the periodic cost, so both schemes can avoid overhead without failures",
        "conclusion: checkpoint/redo is faster and has less memory overhead; undo/redo's advantage is undoing any "
        "suffix and reconciling only the paths a failure affected",
    ],
}


# -- workloads ---------------------------------------------------------------------------------
def _join_spec(state: int) -> str:
    return f"""
name: recjoin
streams:
  a: {{schema: reading, key: sensor}}
  b: {{schema: reading, key: sensor}}
  pairs: {{schema: joined, key: key}}
operators:
  near: {{type: join, left: a, right: b, output: pairs, key: sensor, within: {state},
          fields: {{key: left.sensor, ts: "max(left.ts, right.ts)", left_value: left.value, right_value: right.value}}}}
nodes:
  pair: {{operators: [near]}}
"""


def _window_spec(state: int) -> str:
    return f"""
name: recwin
streams:
  a: {{schema: reading, key: sensor}}
  stats: {{schema: window_stat, key: key}}
operators:
  per_sensor: {{type: window, input: a, output: stats, key: sensor, size: {state}, slide: {max(1, state // 4)},
                aggregates: {{count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}}}
nodes:
  agg: {{operators: [per_sensor]}}
"""


@dataclass
class Workload:
    """One stateful node whose state holds about ``state`` input tuples; feeds tuple i at time i ms."""

    kind: str  # "join" or "window"
    state: int

    def __post_init__(self) -> None:
        text = _join_spec(self.state) if self.kind == "join" else _window_spec(self.state)
        self.spec: Spec = parse_spec(text, source=f"<reconcile {self.kind} {self.state}>")
        self.node = next(iter(self.spec.nodes))
        self.inputs = ["a", "b"] if self.kind == "join" else ["a"]
        keys = max(1, self.state // 2 if self.kind == "join" else self.state // 20)
        self.keys = [f"k{i}" for i in range(keys)]
        self.rng = random.Random(7)

    def records(self, start: int, n: int) -> list[dict[str, Any]]:
        """Tuples start..start+n-1 (call in increasing order: keys are drawn from a seeded generator)."""
        keys, pick = self.keys, self.rng.choice
        return [{"sensor": pick(keys), "ts": i, "value": float(i % 97), "seq": i} for i in range(start, start + n)]

    def batches(self, start: int, n: int) -> list[tuple[str, list[Item]]]:
        """Tuples start..start+n-1 as (input stream, run) pairs, in SUnion's order."""
        recs = self.records(start, n)
        out = []
        for j in range(0, n, RUN):
            i = start + j
            out.append((self.inputs[(i // RUN) % len(self.inputs)], [(r, r["ts"]) for r in recs[j : j + RUN]]))
        return out

    def pipeline(self, undo: bool) -> NodePipeline:
        return NodePipeline(plan_node(self.spec, self.node), undo=undo)


def _feed(p: NodePipeline, batches: list[tuple[str, list[Item]]]) -> int:
    """Push the runs (fresh lists: undo logs keep them) and drain after each, as ``NodeService._run`` does."""
    entries = {s: p.entry(s) for s in p.inputs}
    out = 0
    for s, items in batches:
        entries[s](list(items))
        for v in p.drain().values():
            out += len(v)
    return out


def _timed(fn: Callable[..., Any], *args: Any) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def _state_shape(p: NodePipeline) -> dict[str, int]:
    """What the state holds: input tuples (join) or accumulators and tuples since the oldest window (window)."""
    op = next(o for o in p.operators if o.stateful)
    if isinstance(op, WindowJoin):
        held = sum(len(q) for side in op.sides for q in side.values())
        return {"held_tuples": held, "items": held}
    assert isinstance(op, WindowAggregate)
    windows = op.windows
    accs = sum(len(w) for w in windows.values())
    span = (op.watermark - min(windows) + 1) if windows and op.watermark is not None else 0
    return {"held_tuples": span, "items": accs}


# -- measurements --------------------------------------------------------------------------------
class Cursor:
    """A pipeline plus the index of the next input tuple to feed it."""

    def __init__(self, w: Workload, undo: bool) -> None:
        self.w, self.p, self.next = w, w.pipeline(undo), 0

    def take(self, n: int) -> list[tuple[str, list[Item]]]:
        b = self.w.batches(self.next, n)
        self.next += n
        return b

    def warm_up(self) -> None:
        """Feed until the state is full: 1.5 windows' worth of tuples."""
        chunk = 50_000
        total = self.w.state + self.w.state // 2 + RUN
        while self.next < total:
            _feed(self.p, self.take(min(chunk, total - self.next)))


def _feed_costs(cursors: dict[str, Cursor], pairs: int, n: int = FEED_RUN) -> dict[str, float]:
    """Failure-free µs per tuple of each full-state pipeline, and the undo log's share.

    The two pipelines take turns on runs of ``n`` tuples (alternating which goes first);
    the log's cost is the median of the paired differences, which cancels the machine's
    drift. It is small beside the noise of one run, hence the many pairs.
    """
    t: dict[str, list[float]] = {m: [] for m in cursors}
    order = list(cursors.items())
    for i in range(pairs):
        for m, c in order if i % 2 else order[::-1]:
            b = c.take(n)
            t0 = time.perf_counter()
            _feed(c.p, b)
            t[m].append((time.perf_counter() - t0) * 1e6 / n)
    diff = [u - k for u, k in zip(t["undo"], t["checkpoint"], strict=True)]
    q = statistics.quantiles(diff, n=4)
    return {
        "feed_us_checkpoint": statistics.median(t["checkpoint"]),
        "feed_us_undo": statistics.median(t["undo"]),
        "undo_log_us": statistics.median(diff),
        "undo_log_iqr_us": q[2] - q[0],
    }


def _no_gc(fn: Callable[..., Any], *args: Any) -> float:
    """``_timed`` with the cyclic GC off: how much of a revert is the collector walking the new objects."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn(*args)
        return time.perf_counter() - t0
    finally:
        gc.enable()


def _snapshot_into(p: NodePipeline, out: list[bytes]) -> None:
    out.append(p.snapshot())


def reconcile_checkpoint(c: Cursor, fail: int, repeat: int) -> dict[str, float]:
    """Snapshot before the failure, process ``fail`` tentative tuples, then restore + redo them (ms).

    One extra round times the restore with the GC off (``revert_nogc_ms``).
    """
    snap, restore, redo, size, nogc = [], [], [], 0, 0.0
    for i in range(repeat + 1):
        saved: list[bytes] = []
        snap.append(_timed(_snapshot_into, c.p, saved))
        size = len(saved[0])
        b = c.take(fail)
        _feed(c.p, b)  # the tentative run
        if i == repeat:
            nogc = _no_gc(c.p.restore, saved[0])
            _feed(c.p, b)
            break
        restore.append(_timed(c.p.restore, saved[0]))
        redo.append(_timed(_feed, c.p, b))
    return {
        "snapshot_ms": statistics.median(snap) * 1e3,
        "snapshot_bytes": size,
        "revert_ms": statistics.median(restore) * 1e3,
        "redo_ms": statistics.median(redo) * 1e3,
        "total_ms": statistics.median(r + d for r, d in zip(restore, redo, strict=True)) * 1e3,
        "revert_nogc_ms": nogc * 1e3,
    }


def reconcile_undo(c: Cursor, fail: int, repeat: int) -> dict[str, float]:
    """Mark before the failure, process ``fail`` tentative tuples, then undo + redo them (ms).

    One extra round times the undo with the GC off (``revert_nogc_ms``).
    """
    mark, undo, redo, logged, nogc = [], [], [], 0, 0.0
    for i in range(repeat + 1):
        mark.append(_timed(c.p.mark))
        b = c.take(fail)
        _feed(c.p, b)
        logged = sum(len(x) for lg in c.p.logs or () for port, x in lg.entries if port >= 0 and isinstance(x, list))
        if i == repeat:
            nogc = _no_gc(c.p.undo)
            _feed(c.p, b)
            break
        undo.append(_timed(c.p.undo))
        redo.append(_timed(_feed, c.p, b))
    return {
        "mark_ms": statistics.median(mark) * 1e3,
        "log_tuples": logged,
        "revert_ms": statistics.median(undo) * 1e3,
        "redo_ms": statistics.median(redo) * 1e3,
        "total_ms": statistics.median(u + d for u, d in zip(undo, redo, strict=True)) * 1e3,
        "revert_nogc_ms": nogc * 1e3,
    }


def measure_point(kind: str, state: int, fail: int, repeat: int, feed_pairs: int | None) -> dict[str, Any]:
    """Both methods on one workload and state size; ``feed_pairs`` also measures the failure-free feed cost.

    Each method has its own pipeline (the node builds ``undo=True`` only for undo/redo) fed
    the same input sequence.
    """
    cursors = {
        "checkpoint": Cursor(Workload(kind, state), undo=False),
        "undo": Cursor(Workload(kind, state), undo=True),
    }
    for c in cursors.values():
        c.warm_up()
    out: dict[str, Any] = {
        "kind": kind,
        "state": state,
        "failure_tuples": fail,
        **_state_shape(cursors["checkpoint"].p),
    }
    if feed_pairs:
        out.update(_feed_costs(cursors, feed_pairs))
    out["checkpoint"] = reconcile_checkpoint(cursors["checkpoint"], fail, repeat)
    out["undo"] = reconcile_undo(cursors["undo"], fail, repeat)
    del cursors
    gc.collect()
    if feed_pairs:
        # Checkpoint/redo's failure-free cost: one snapshot per checkpoint interval at REF_RATE.
        per = REF_RATE * CHECKPOINT_INTERVAL_MS / 1000
        out["checkpoint_us"] = out["checkpoint"]["snapshot_ms"] * 1e3 / per
    return out


def dpc_costs(n: int, progress_step: Callable[[], None]) -> dict[str, Any]:
    """SUnion and SOutput beside the operators, by ``bench.dpc_cost.measure`` (one input only)."""
    from bench.dpc_cost import measure
    from bench.workload import filter_map_spec, reading_records, throughput_window_spec

    out: dict[str, Any] = {}
    records = list(reading_records(n))
    for name, text in (
        ("filter+map", filter_map_spec("dpcfm", "dpc_in")),
        ("window (throughput bench)", throughput_window_spec("dpcw", "dpc_in")),
    ):
        spec = parse_spec(text, source=f"<dpc cost {name}>")
        out[name] = measure(spec, next(iter(spec.nodes)), records)
        progress_step()
    w = Workload("window", REF_STATE)
    out[f"window S={REF_STATE:,}"] = measure(w.spec, w.node, w.records(0, max(n, REF_STATE * 2)))
    progress_step()
    return out


class Steps:
    """Progress for an experiment, on a ``rich.progress.Progress`` or the orchestrator's
    ``bench.borealis.common.Progress`` (``plan``/``advance``/``note``), or on nothing."""

    def __init__(self, progress: Any, description: str, total: int) -> None:
        self.p, self.description = progress, description
        self.task = None
        if progress is None:
            return
        if hasattr(progress, "add_task"):  # rich
            self.task = progress.add_task(description, total=total)
        else:
            progress.plan(total)
            progress(description)

    def advance(self, what: str | None = None) -> None:
        desc = f"{self.description}: {what}" if what else self.description
        if self.p is None:
            return
        if self.task is not None:
            self.p.update(self.task, advance=1, description=desc)
        else:
            self.p(desc, advance=1)

    def note(self, text: str) -> None:
        if self.p is None:
            return
        if self.task is not None:
            self.p.console.print(text)
        elif hasattr(self.p, "note"):
            self.p.note(text)


def run(quick: bool, progress: Progress | None) -> dict[str, Any]:
    """Every measurement, with what the process held before frozen out of the cyclic GC: a collection
    then walks the pipelines' objects only, as in a node, not a caller's heap (under a test run's
    million objects each ``gc.collect()`` took a second)."""
    gc.collect()
    gc.freeze()
    try:
        return _run(quick, progress)
    finally:
        gc.unfreeze()


def _run(quick: bool, progress: Progress | None) -> dict[str, Any]:
    cfg = QUICK if quick else FULL
    t0 = time.monotonic()
    kinds = ("join", "window")
    steps = Steps(
        progress, "reconcile: checkpoint/redo vs undo/redo", len(kinds) * (len(cfg["sizes"]) + len(cfg["redo"])) + 3
    )
    result: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "machine": host(),
        "paper": PAPER,
        "settings": {
            **cfg,
            "run": RUN,
            "checkpoint_interval_ms": CHECKPOINT_INTERVAL_MS,
            "ref_rate": REF_RATE,
            "ref_state": REF_STATE,
            "tuple_step_ms": 1,
        },
        "state_sweep": {},
        "redo_sweep": {},
    }
    for kind in kinds:
        rows = []
        for s in cfg["sizes"]:
            feed = cfg["feed_pairs"] if s in (cfg["sizes"][0], REF_STATE) or not quick else None
            rows.append(measure_point(kind, s, cfg["failure_tuples"], cfg["repeat"], feed))
            steps.advance(f"{kind}, S={s:,}")
        result["state_sweep"][kind] = rows
        rows = []
        for d in cfg["redo"]:
            rows.append(measure_point(kind, cfg["redo_state"], d, cfg["repeat"], None))
            steps.advance(f"{kind}, redo {d:,}")
        result["redo_sweep"][kind] = rows
    result["dpc_cost"] = dpc_costs(cfg["dpc_cost_tuples"], lambda: steps.advance("SUnion/SOutput cost"))
    result["elapsed_s"] = time.monotonic() - t0
    return result


# -- report ----------------------------------------------------------------------------------------
def _footnote(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["settings"]
    return (
        f"In process, no Kafka; input time +1 ms per tuple, runs of {s['run']}; {s['failure_tuples']:,} tuples "
        f"to redo in the state sweep; median of {s['repeat']}. Overheads at {s['ref_rate']:,} tuples/s, "
        f"checkpoint every {s['checkpoint_interval_ms']} ms.  Hardware: {m['cores']} × {m['cpu']}, Python {m['python']}"
        f"{' (quick run)' if result['quick'] else ''}"
    )


def plot(result: dict[str, Any], docs_dir: Path) -> list[Path]:
    plt = pyplot()
    colours = {"checkpoint": "#2a7ab9", "undo": "#e08a2c"}
    styles = {"join": "-", "window": "--"}
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4.8))
    sweeps = (
        (
            a,
            "state_sweep",
            "held_tuples",
            "state size S (input tuples in the state)",
            f"vs state size ({result['settings']['failure_tuples']:,} tuples to redo)",
        ),
        (
            b,
            "redo_sweep",
            "failure_tuples",
            "tuples to redo (D·λ)",
            f"vs tuples to redo (S = {result['settings']['redo_state']:,})",
        ),
    )
    for ax, sweep, xkey, xlabel, title in sweeps:
        for kind, rows in result[sweep].items():
            xs = [r[xkey] for r in rows]
            for m in ("checkpoint", "undo"):
                ax.plot(
                    xs,
                    [r[m]["total_ms"] for r in rows],
                    styles[kind],
                    marker="o",
                    color=colours[m],
                    label=f"{m}/redo, {kind}",
                )
        ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="reconciliation time (ms)", title=title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    # Failure-free CPU per input tuple at the reference state, window and join.
    ref = {
        k: next((r for r in rows if r["state"] == REF_STATE and "undo_log_us" in r), None)
        for k, rows in result["state_sweep"].items()
    }
    dc = result["dpc_cost"].get(f"window S={REF_STATE:,}")
    labels, parts = [], []
    for kind, r in ref.items():
        if r is None:
            continue
        labels.append(kind)
        sunion = dc["dpc_overhead_us"] if dc and kind == "window" else float("nan")
        parts.append((r["feed_us_checkpoint"], sunion, r["undo_log_us"], r["checkpoint_us"]))
    x = range(len(labels))
    names = ("operators alone", "+ SUnion & SOutput", "undo/redo: input log", "checkpoint/redo: snapshot every 2 s")
    cols = ("#888888", "#6aa84f", colours["undo"], colours["checkpoint"])
    width = 0.2
    for j, (nm, col) in enumerate(zip(names, cols, strict=True)):
        vals = [p[j] for p in parts]
        bars = c.bar([i + (j - 1.5) * width for i in x], [0 if v != v else v for v in vals], width, label=nm, color=col)
        for bar, v in zip(bars, vals, strict=True):
            c.annotate(
                "n/a" if v != v else f"{v:.2f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    c.set_xticks(list(x), labels)
    c.set(ylabel="CPU µs per input tuple", title=f"failure-free cost, S = {REF_STATE:,} tuples")
    top = max((v for p in parts for v in p if v == v), default=1.0)
    c.set_ylim(min(0.0, *(v for p in parts for v in p if v == v)) * 1.2, top * 1.6)
    c.legend(fontsize=8, loc="upper left")
    title = "hastream reconciliation: checkpoint/redo vs undo/redo (Borealis DPC, SIGMOD'05 §6.3)"
    return [save_footnoted(fig, docs_dir / "borealis_reconcile.png", title, _footnote(result))]


def _ms(v: float) -> str:
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def _ratio(undo_ms: float, ckpt_ms: float, than: bool = False) -> str:
    """How undo/redo compares (within 15 % counts as a tie), in words that stay right whichever way it goes."""
    r = undo_ms / ckpt_ms
    suffix = "-than" if than else ""
    if r >= 1.15:
        return fill(PAGE, "slower" + suffix, times=f"{r:.1f}")
    if r <= 1 / 1.15:
        return fill(PAGE, "faster" + suffix, times=f"{1 / r:.1f}")
    return fill(PAGE, "tie" + suffix)


def _table(head: str, rows: list[str]) -> str:
    """A markdown table: its header block of the template, then the rows."""
    return "\n".join([fill(PAGE, head), *rows])


def section(result: dict[str, Any]) -> str:
    s, m = result["settings"], result["machine"]
    state_rows = []
    for kind, rows in result["state_sweep"].items():
        for r in rows:
            ck, un = r["checkpoint"], r["undo"]
            state_rows.append(
                f"| {kind} | {r['held_tuples']:,} | {_ms(ck['revert_ms'])} + {_ms(ck['redo_ms'])} = "
                f"**{_ms(ck['total_ms'])}** | {_ms(un['revert_ms'])} + {_ms(un['redo_ms'])} = "
                f"**{_ms(un['total_ms'])}** | {_ratio(un['total_ms'], ck['total_ms'])} | "
                f"{_ms(ck['revert_nogc_ms'])} / {_ms(un['revert_nogc_ms'])} |"
            )
    redo_rows = []
    for kind, rows in result["redo_sweep"].items():
        for r in rows:
            ck, un = r["checkpoint"]["total_ms"], r["undo"]["total_ms"]
            redo_rows.append(f"| {kind} | {r['failure_tuples']:,} | {_ms(ck)} | {_ms(un)} | {_ratio(un, ck)} |")
    feed_rows = []
    for kind, rows in result["state_sweep"].items():
        for r in rows:
            if "undo_log_us" in r:
                ck = r["checkpoint"]
                feed_rows.append(
                    f"| {kind} | {r['held_tuples']:,} | {r['feed_us_checkpoint']:.2f} | {r['undo_log_us']:+.2f} "
                    f"± {r['undo_log_iqr_us'] / 2:.2f} | +{r['checkpoint_us']:.2f} | {_ms(ck['snapshot_ms'])} / "
                    f"{ck['snapshot_bytes']:,} |"
                )
    dpc_rows = [
        f"| {name} | {r['operators_us']:.2f} | {r['node_step_us']:.2f} | {r['dpc_overhead_us']:.2f} | "
        f"{r['sunion_us']:.2f} | {r['soutput_us']:.2f} |"
        for name, r in result["dpc_cost"].items()
    ]
    return (
        fill(
            PAGE,
            "section",
            quick_flag=fill(PAGE, "quick-flag") if result["quick"] else "",
            cores=m["cores"],
            cpu=m["cpu"],
            python=m["python"],
            elapsed=f"{result['elapsed_s']:.0f}",
            repeat=s["repeat"],
            failure_tuples=f"{s['failure_tuples']:,}",
            state_table=_table("state-table", state_rows),
            redo_state=f"{s['redo_state']:,}",
            redo_table=_table("redo-table", redo_rows),
            feed_pairs=s["feed_pairs"],
            feed_run=f"{FEED_RUN:,}",
            checkpoint_interval_ms=s["checkpoint_interval_ms"],
            ref_rate=f"{s['ref_rate']:,}",
            feed_table=_table("feed-table", feed_rows),
            dpc_table=_table("dpc-table", dpc_rows),
            comparison=_comparison(result),
        )
        + "\n"
    )


def _slope(rows: list[dict[str, Any]], method: str, x: str, part: str = "total_ms") -> float:
    """µs per unit of ``x`` between the smallest and the largest point."""
    a, b = rows[0], rows[-1]
    return (b[method][part] - a[method][part]) * 1e3 / max(1, b[x] - a[x])


def _per(row: dict[str, Any], method: str) -> float:
    """µs per state tuple of a revert (restore or undo)."""
    return row[method]["revert_ms"] * 1e3 / max(1, row["held_tuples"])


def _comparison(result: dict[str, Any]) -> str:
    st, rd, s = result["state_sweep"], result["redo_sweep"], result["settings"]
    j, w = st["join"], st["window"]
    jl, wl = j[-1], w[-1]
    ref = {k: next((r for r in rows if r["state"] == REF_STATE and "undo_log_us" in r), None) for k, rows in st.items()}
    dc = result["dpc_cost"]
    premise = "premise-cpython" if jl["undo"]["total_ms"] < 1.5 * jl["checkpoint"]["total_ms"] else "premise-paper"
    out = [
        fill(
            PAGE,
            "join",
            restore_small=f"{_per(j[0], 'checkpoint'):.2f}",
            small=f"{j[0]['held_tuples']:,}",
            restore_large=f"{_per(jl, 'checkpoint'):.2f}",
            large=f"{jl['held_tuples']:,}",
            rebuild_small=f"{_per(j[0], 'undo'):.2f}",
            rebuild_large=f"{_per(jl, 'undo'):.2f}",
            ratio=_ratio(jl["undo"]["total_ms"], jl["checkpoint"]["total_ms"], True),
            premise=fill(PAGE, premise) + " ",
            restore_nogc=_ms(jl["checkpoint"]["revert_nogc_ms"]),
            restore_ms=_ms(jl["checkpoint"]["revert_ms"]),
            undo_nogc=_ms(jl["undo"]["revert_nogc_ms"]),
            undo_ms=_ms(jl["undo"]["revert_ms"]),
        ),
        fill(
            PAGE,
            "window",
            large=f"{wl['held_tuples']:,}",
            ratio=_ratio(wl["undo"]["total_ms"], wl["checkpoint"]["total_ms"], True),
            restore_small=f"{_per(w[0], 'checkpoint'):.2f}",
            restore_large=f"{_per(wl, 'checkpoint'):.2f}",
            rebuild_small=f"{_per(w[0], 'undo'):.2f}",
            rebuild_large=f"{_per(wl, 'undo'):.2f}",
        ),
        fill(PAGE, "shape"),
        fill(
            PAGE,
            "redo",
            redo_state=f"{s['redo_state']:,}",
            join_checkpoint=f"{_slope(rd['join'], 'checkpoint', 'failure_tuples'):.2f}",
            join_undo=f"{_slope(rd['join'], 'undo', 'failure_tuples'):.2f}",
            window_checkpoint=f"{_slope(rd['window'], 'checkpoint', 'failure_tuples'):.2f}",
            window_undo=f"{_slope(rd['window'], 'undo', 'failure_tuples'):.2f}",
        ),
    ]
    rj, rw = ref.get("join"), ref.get("window")
    if rj and rw:
        out.append(
            fill(
                PAGE,
                "failure-free",
                ref_state=f"{REF_STATE:,}",
                join_log=f"{rj['undo_log_us']:+.2f}",
                window_log=f"{rw['undo_log_us']:+.2f}",
                join_feed=f"{rj['feed_us_checkpoint']:.2f}",
                window_feed=f"{rw['feed_us_checkpoint']:.2f}",
                checkpoint_interval_ms=s["checkpoint_interval_ms"],
                ref_rate=f"{s['ref_rate']:,}",
                join_checkpoint=f"{rj['checkpoint_us']:.2f}",
                join_snapshot=_ms(rj["checkpoint"]["snapshot_ms"]),
                window_checkpoint=f"{rw['checkpoint_us']:.2f}",
            )
        )
    fm = dc.get("filter+map") if dc else None
    if fm:
        out.append(fill(PAGE, "sunion", overhead=f"{fm['dpc_overhead_us']:.2f}", operators=f"{fm['operators_us']:.2f}"))
    out.append(fill(PAGE, "absolute"))
    return fill(PAGE, "comparison", bullets="\n".join(out))


def main(argv: list[str] | None = None) -> None:
    from bench.borealis.common import standalone

    standalone(NAME, __doc__, "fewer and smaller states (about a minute)", run, plot, section, argv)


if __name__ == "__main__":
    main()
