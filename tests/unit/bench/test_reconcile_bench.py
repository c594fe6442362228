"""The Borealis reconciliation and failover experiments: they measure real reconciliations and report sanely.

No broker: the reconciliation benchmark runs in process on tiny states, and the failover
report is fed a synthetic result.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.borealis import failover, reconcile
from bench.borealis.reconcile import Cursor, Workload, _feed

BIG = 10**12


@pytest.fixture(autouse=True)
def _own_heap() -> Iterator[None]:
    """What the test process holds frozen out of the cyclic GC, which the measurements run between
    runs: after the broker tests that is a million objects, and each collection took a second."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def _rest(c: Cursor, n: int) -> list:
    """Feed ``n`` more tuples, then flush every window: the output that depends on the state."""
    out: list = []
    entries = {s: c.p.entry(s) for s in c.p.inputs}
    for s, items in c.take(n):
        entries[s](list(items))
    c.p.advance(BIG)
    for v in c.p.drain().values():
        out.extend(v)
    return out


@pytest.mark.parametrize("kind", ["join", "window"])
@pytest.mark.parametrize("method", ["checkpoint", "undo"])
def test_a_measured_reconciliation_restores_the_failure_free_state(kind: str, method: str) -> None:
    undo = method == "undo"
    c, ref = Cursor(Workload(kind, 400), undo), Cursor(Workload(kind, 400), undo)
    c.warm_up()
    ref.warm_up()
    fail, repeat = 150, 2
    (reconcile.reconcile_undo if undo else reconcile.reconcile_checkpoint)(c, fail, repeat)
    _feed(ref.p, ref.take(fail * (repeat + 1)))  # the same tuples, processed once, without a failure
    ref.p.drain()
    assert _rest(c, 1000) == _rest(ref, 1000)


def test_reconcile_run_plot_and_section(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tiny = {
        "sizes": [500, 2_000],
        "redo_state": 500,
        "redo": [200, 800],
        "failure_tuples": 100,
        "repeat": 1,
        "feed_pairs": 4,
        "dpc_cost_tuples": 2_000,
    }
    monkeypatch.setattr(reconcile, "QUICK", tiny)
    monkeypatch.setattr(reconcile, "REF_STATE", 2_000)
    monkeypatch.setattr(reconcile, "FEED_RUN", 200)
    r = reconcile.run(True, None)
    for kind in ("join", "window"):
        rows = r["state_sweep"][kind]
        assert [row["state"] for row in rows] == [500, 2_000]
        assert all(row[m]["total_ms"] > 0 for row in rows for m in ("checkpoint", "undo"))
        assert "undo_log_us" in rows[-1]
    text = reconcile.section(r)
    assert "| join |" in text and "Compared with the paper" in text and "borealis_reconcile.png" in text
    (png,) = reconcile.plot(r, tmp_path)
    assert png.name == "borealis_reconcile.png" and png.stat().st_size > 10_000


def _trial(i: int, failover_ms: float, hb_age: float) -> dict:
    return {
        "victim": i % 2,
        "t_kill": float(i),
        "hb_age_ms": hb_age,
        "in_flight": 0,
        "ok": True,
        "failover_ms": failover_ms,
        "first_kind": "stable",
        "max_delay_ms": failover_ms + 40,
        "detect_ms": failover_ms - 20,
        "switch_ms": 20.0,
        "restart_ok": True,
        "restart_s": 0.6,
        "gaps": 0,
        "duplicates_dropped": 0,
        "sequence_ok": True,
        "stable_so_far": 100 * (i + 1),
    }


def test_failover_summary_section_and_plot(tmp_path: Path) -> None:
    results = []
    for label, hb, ft in failover.SETTINGS:
        trials = [_trial(i, ft - 50 + 10 * i, 50 - 5 * i) for i in range(5)]
        s: dict[str, Any] = {
            "label": label,
            "heartbeat_ms": hb,
            "failure_timeout_ms": ft,
            "trials": trials,
            "sent": 500,
            "client_stable": 500,
            "final_sequence_ok": True,
            "client_gaps": 0,
            "client_duplicates_dropped": 0,
            "client_events": {"stable": 500},
            "client_switches": 5,
            "steady_latency_p50_ms": 70.0,
            "elapsed_s": 30.0,
        }
        s["summary"] = failover.summarize(s)
        results.append(s)
    sm = results[0]["summary"]
    assert sm["all_ok"] and sm["failover_ms"]["n"] == 5 and sm["failover_ms"]["max"] == 1000 - 50 + 40
    result = {
        "name": "failover",
        "quick": True,
        "elapsed_s": 60.0,
        "paper": failover.PAPER,
        "machine": {"cores": 2, "cpu": "test CPU", "python": "3.11", "kafka": "4", "broker": "test"},
        "settings": {"trials": 5, "rate": failover.RATE},
        "results": results,
    }
    text = failover.section(result)
    assert "complete, no gap or duplicate" in text and "**FAILED**" not in text
    (png,) = failover.plot(result, tmp_path)
    assert png.stat().st_size > 10_000
