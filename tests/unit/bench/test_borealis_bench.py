"""The Borealis experiments' metrics, from recorded events (no broker)."""

from __future__ import annotations

import math

from bench.borealis import metrics
from bench.borealis.chain import RunConfig, chain_spec
from bench.borealis.common import Progress, md_table
from services.spec import parse_spec


def test_delay_new_is_the_max_over_new_tuples_and_leaves_out_the_cut_off_input() -> None:
    generated = {("in1", 0): 10.0, ("in2", 0): 10.0, ("in1", 1): 11.0, ("in2", 1): 11.0, ("in2", 2): 14.0}
    first_seen = {("in1", 0): 10.2, ("in2", 0): 15.5, ("in1", 1): 13.7, ("in2", 1): 15.5, ("in2", 2): 14.3}
    outage = metrics.Outage("in2", 9.9, 14.0)  # in2's tuples generated before 14.0 were held back
    d = metrics.delays(first_seen, generated, outage)
    assert set(d) == {("in1", 0), ("in1", 1), ("in2", 2)}  # in2 at 14.0 is generated after the heal: new
    s = metrics.summary(d)
    assert math.isclose(s["delay_new_s"], 2.7) and s["tuples"] == 3
    assert math.isclose(metrics.summary(metrics.delays(first_seen, generated))["delay_new_s"], 5.5)


def test_missing_counts_inputs_never_seen_in_any_version() -> None:
    assert metrics.missing({("in1", 0): 1.0}, {("in1", 0): 0.5, ("in1", 1): 0.6}) == 1


def test_percentile_and_empty_summary() -> None:
    vals = [float(i) for i in range(1, 101)]
    assert metrics.percentile(vals, 50) == 50.0 and metrics.percentile(vals, 99) == 99.0
    assert math.isnan(metrics.summary({})["delay_new_s"])


def test_timeline_keeps_the_max_per_bin() -> None:
    generated = {("a", 0): 100.1, ("a", 1): 100.4, ("a", 2): 101.2}
    d = {("a", 0): 0.2, ("a", 1): 2.5, ("a", 2): 0.1}
    assert metrics.timeline(d, generated, t0=100.0, bin_s=1.0) == [[0.0, 2.5], [1.0, 0.1]]


def test_chain_output_is_sunion_order_with_one_increment_per_map_node() -> None:
    out = metrics.chain_output(ticks=2, inputs=3, node=3)
    assert [(r["sensor"], r["seq"]) for r in out] == [
        ("in1", 0),
        ("in2", 0),
        ("in3", 0),
        ("in1", 1),
        ("in2", 1),
        ("in3", 1),
    ]
    assert all(r["value"] == r["seq"] % 50 + 2 for r in out)


def test_compare_names_the_first_difference() -> None:
    assert metrics.compare([1, 2, 3], [1, 2, 3]) == {"ok": True, "got": 3, "want": 3, "first_mismatch": None}
    assert metrics.compare([1, 9, 3], [1, 2, 3])["first_mismatch"] == 1
    assert metrics.compare([1, 2], [1, 2, 3]) == {"ok": False, "got": 2, "want": 3, "first_mismatch": 2}


def test_chain_spec_splits_x_per_node_and_sets_the_policies(tmp_path) -> None:
    cfg = RunConfig(k=3, policy="Delay & Delay", x_ms=3000, alpha=0.9)
    text = chain_spec(cfg, "abc")
    spec = parse_spec(text, "spec.yaml", tmp_path / "spec.yaml")
    assert list(spec.nodes) == ["n1", "n2", "n3"] and spec.sinks() == ["out3_abc"]
    assert spec.dpc.delay == 9000 and spec.dpc.failure_policy == "delay" and spec.dpc.stabilization_policy == "delay"
    assert all(math.isclose(spec.node_delay_s(n), 2.7) for n in spec.nodes)
    assert all(spec.nodes[n].replicas == 2 for n in spec.nodes)
    process = parse_spec(chain_spec(RunConfig(k=3, x_ms=3000, alpha=0.9), "abc"), "spec.yaml", tmp_path / "spec.yaml")
    assert process.dpc.delay == 3000, "under process only the first node of a path waits: X end to end is one X"
    assert all(math.isclose(process.node_delay_s(n), 2.7) for n in process.nodes), "every node waits the paper's αX"


def test_progress_counts_planned_and_done_steps() -> None:
    seen: list[dict] = []
    p = Progress(lambda **kw: seen.append(kw))
    p.plan(3)
    p("run 1")
    p.advance()
    assert seen[-1]["completed"] == 1 and seen[-1]["total"] == 3 and seen[-2]["description"] == "run 1"
    assert md_table(["a", "b"], [[1, 2]]) == "| a | b |\n|---|---|\n| 1 | 2 |"


def test_warm_up_tuples_do_not_count() -> None:
    d = metrics.delays({("in1", 0): 5.0, ("in1", 1): 5.2}, {("in1", 0): 0.5, ("in1", 1): 5.0}, since=1.0)
    assert d == {("in1", 1): 0.20000000000000018}


def test_the_victim_is_the_replica_on_the_clients_path(tmp_path) -> None:
    from bench.borealis.chain import victim

    # client reads n3.r1; n3.r1 switched to n2.r0 at start-up; n2.r0 still reads n1.r0
    (tmp_path / "n3.r1.p0.log").write_text("node n3 p0 r1: input out2_u now reads out2_u.r0 from offset 0\n")
    (tmp_path / "n2.r0.p0.log").write_text("node n2 p0 r0 (checkpoint) reading out1_u.r0\n")
    assert victim(RunConfig(k=3, kill="head"), 1, tmp_path, "u") == "n1.r0.p0"
    assert victim(RunConfig(k=3, kill="sink"), 1, tmp_path, "u") == "n3.r1.p0"
    assert victim(RunConfig(k=1, kill="head"), 1, tmp_path, "u") == "n1.r1.p0"


def _chain_run(policy: str, k: int, delay_new: float, n_tentative: int) -> dict:
    cfg = {"k": k, "policy": policy, "rate": 100, "fault_s": 15.0, "alpha_x_s": 2.7, "x_ms": 3000, "alpha": 0.9}
    return {
        "label": f"k={k} {policy}",
        "config": cfg,
        "delay_new_s": delay_new,
        "p99_s": delay_new - 0.3,
        "n_tentative": n_tentative,
        "client_switches": 1,
        "consistent": True,
    }


def test_chain_page_compares_with_the_paper_from_the_runs_own_numbers() -> None:
    from bench.borealis import chain_length

    runs = [
        _chain_run("Process & Process", 1, 2.8, 3100),
        _chain_run("Process & Process", 2, 2.9, 3300),
        _chain_run("Delay & Delay", 1, 3.1, 2500),
        _chain_run("Delay & Delay", 2, 5.9, 2000),
    ]
    result = {
        "quick": False,
        "runs": runs,
        "settings": {
            "ks": [1, 2],
            "policies": ["Process & Process", "Delay & Delay"],
            "fault_at": 5.0,
            "fault_s": 15.0,
            "tail_s": 12.0,
        },
    }
    page = chain_length.section(result)
    assert "(2.80, 2.90 s)" in page and "up to 300 produced" in page
    assert "k = 1: 3.10 s is above kX = 3 s by 0.10 s" in page  # the bound is checked, not asserted
    assert "(2460, 1920)" in page  # (failure - k·αX) × 2 × rate


def test_single_node_page_says_whether_delay_saved_tentative_tuples() -> None:
    from bench.borealis.single_node import _delay_reading

    def run(policy: str, ax: float, n: int) -> dict:
        return {"config": {"policy": policy, "alpha_x_s": ax, "rate": 100}, "n_tentative": n}

    saved = [run("Process & Process", 1.0, 1200), run("Delay & Delay", 1.0, 1000), run("Delay & Delay", 8.0, 0)]
    assert _delay_reading(saved, 6.0).startswith("*Delay saves tentative tuples")
    not_saved = [run("Process & Process", 1.0, 1200), run("Delay & Delay", 1.0, 1300)]
    assert _delay_reading(not_saved, 6.0).startswith("*Delay does not always save")


def test_pass_through_union_hands_tuples_on_in_arrival_order_without_waiting() -> None:
    from bench.throughput.processors import PassThroughUnion
    from services.core.tuples import TupleType

    su = PassThroughUnion(2, bucket_ms=100, delay_s=3.0)
    su.push(1, TupleType.STABLE, 0, 250, "b0", now=0.0)
    su.push(0, TupleType.STABLE, 0, 120, "a0", now=0.0)
    got = su.poll(now=0.0)  # no boundary yet: SUnion would hold both
    assert [(t.port, t.stime, t.rec) for t in got] == [(1, 250, "b0"), (0, 120, "a0")]
    assert su.poll(now=0.0) == []
    su.boundary(0, 300)
    su.boundary(1, 400)
    assert su.frontier() == 300  # boundaries still move operator time and go downstream


def test_overhead_fit_and_page_come_from_the_runs_numbers() -> None:
    from bench.borealis import overhead

    assert overhead.fit([(10, 15.0), (100, 105.0), (500, 505.0)]) == (1.0, 5.0)
    lat = [
        {
            "variant": "without serialization",
            "bucket_ms": None,
            "mean_ms": 2.0,
            "p50_ms": 2,
            "p99_ms": 6,
            "samples": 4000,
        }
    ]
    lat += [
        {
            "variant": "with SUnion + SOutput",
            "bucket_ms": b,
            "mean_ms": b + 20.0,
            "p50_ms": b + 20,
            "p99_ms": 2 * b + 20,
            "samples": 4000,
        }
        for b in (10, 100, 500)
    ]
    tp = {
        "bare loop": {"tuples_per_s": 100_000, "runs_tuples_per_s": [100_000], "cpu_s_per_mtuple": 5.0},
        "without serialization": {"tuples_per_s": 60_000, "runs_tuples_per_s": [60_000], "cpu_s_per_mtuple": 14.0},
        "with SUnion + SOutput": {"tuples_per_s": 50_000, "runs_tuples_per_s": [50_000], "cpu_s_per_mtuple": 16.5},
    }
    result = {"quick": True, "settings": overhead.settings(True), "throughput": tp, "latency": lat}
    page = overhead.section(result)
    assert "1.00 ms per ms of boundary interval plus 20 ms" in page
    assert "the mean is 120 ms against 2.0 ms" in page
    assert "used 2.5 µs more CPU per tuple" in page and "moves 0.83× the tuples/s" in page
    result["in_process"] = {"sunion_us": 0.81, "soutput_us": 0.05, "operators_us": 0.32}
    assert "SUnion costs 0.81 µs per tuple and SOutput 0.05 µs, beside 0.32 µs" in overhead.section(result)
    tp["with SUnion + SOutput"]["tuples_per_s"] = 62_000  # faster than without: noise, and the page says so
    assert "within what separates two runs" in overhead.section(result)


def test_notes_name_repeated_tentative_tuples_and_every_run_over_x() -> None:
    from bench.borealis.chain import over_x_note, repeat_note

    cfg = {"k": 1, "policy": "Delay & Delay", "x_ms": 3000, "fault_at": 4.0, "fault_s": 15.0}
    over = {
        "label": "D=15s Delay & Delay",
        "config": cfg,
        "delay_new_s": 3.3,
        "n_tentative": 9000,
        "tentative_unique": 5600,
        "client_switches": 1,
        "timeline": [[10.0, 2.7], [16.5, 3.3], [17.0, 3.0]],
    }
    fine = {
        "label": "D=8s Delay & Delay",
        "config": {**cfg, "fault_s": 8.0},
        "delay_new_s": 2.8,
        "n_tentative": 1100,
        "tentative_unique": 1100,
        "client_switches": 0,
        "timeline": [[5.0, 2.8]],
    }
    assert "D=15s Delay & Delay: 9000 received, 5600 distinct" in repeat_note([over, fine])
    assert "D=8s" not in repeat_note([over, fine]) and repeat_note([fine]) == ""
    note = over_x_note([over, fine])
    assert "generated 2.5 s before the heal" in note and "D=8s" not in note
    assert over_x_note([fine]) == ""
    unswitched = {**over, "label": "D=30s Delay & Delay", "client_switches": 0}
    assert "D=30s Delay & Delay: 3.30 s" in over_x_note([unswitched]), "over X without a switch is named too"
    suspend = {**over, "config": {**cfg, "policy": "Process & Suspend"}}
    assert over_x_note([suspend]) == "", "the paper shows Process & Suspend cannot keep X"
