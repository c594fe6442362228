"""CPU cost of DPC's SUnion and SOutput in the failure-free case, in process (no Kafka).

    python -m bench.dpc_cost [--tuples N]

For one node spec (the benchmark's filter+map or window node), the same decoded ``reading``
records go through:

* ``operators``: the node's operator pipeline alone (feed a batch, drain the output), what a
  node without DPC would run between decoding and encoding;
* ``node step``: what ``NodeService`` runs in ``DpcScheme.after_batch`` (between ingest and produce) in STABLE
  state: ``SUnion.push`` per tuple and a BOUNDARY per batch, then the node's own ``_step``
  (``SUnion.poll``, the operators, ``SOutput`` numbering, ``advance`` and the output BOUNDARY);
* ``SUnion`` alone (push, boundary, poll) and ``SOutput`` alone (numbering the operators'
  output), to split the difference between the two. SUnion here serializes its one input by
  buckets, as the paper's does every input; a hastream node with one input passes its stable
  tuples past it (``services.dpc.sunion``), and ``node step`` does what that node does.

Batches are ``batch`` tuples with one BOUNDARY each (the input's boundary at the batch's
largest stime), so every batch is released STABLE by the next poll, like a live input whose
boundaries keep up. Figures are CPU µs per input tuple, the best of ``repeat`` passes.
Header parsing in ``_ingest`` and header building in ``_produce`` are not included (the
Kafka benchmark's per-tuple CPU covers them).
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

from services.core.tuples import TupleType
from services.dpc.scheme import DpcScheme
from services.dpc.soutput import SOutput
from services.dpc.sunion import SUnion
from services.node.loop import NodeService
from services.schemes import build_scheme
from services.spec import Spec, parse_spec

STABLE = TupleType.STABLE


def _batches(records: list[dict[str, Any]], batch: int) -> list[list[tuple[dict[str, Any], int]]]:
    items = [(r, r["ts"]) for r in records]
    return [items[i : i + batch] for i in range(0, len(items), batch)]


def dpc_scheme(svc: NodeService) -> DpcScheme:
    """The node's recovery scheme, which is DPC's for every node these benchmarks build."""
    assert isinstance(svc.scheme, DpcScheme), f"{svc.name} runs {type(svc.scheme).__name__}, not DPC"
    return svc.scheme


def _cpu(fn: Callable[[], None], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def measure(spec: Spec, node: str, records: list[dict[str, Any]], batch: int = 1000, repeat: int = 3) -> dict[str, Any]:
    """µs of CPU per input tuple for each stage (see the module docstring)."""
    batches = _batches(records, batch)
    n = len(records)
    now = time.monotonic()  # a fixed clock: nothing waits for SUnion's delay here

    def operators_only() -> None:
        svc = NodeService(spec, node, 0, 0, _settings(), build_scheme)
        entry, drain = dpc_scheme(svc).path.entries[0], svc.pipeline.drain
        for items in batches:
            entry(items)
            drain()

    def node_step() -> None:
        svc = NodeService(spec, node, 0, 0, _settings(), build_scheme)
        scheme = dpc_scheme(svc)
        su, step, queues = scheme.path.sunion, scheme.after_batch, list(svc.outputs.queues.values())
        push = su.push
        tid = 0
        for items in batches:
            if su.in_order:  # one input: its stable tuples go past SUnion, as ``DpcScheme._take_in_order`` sends them
                scheme.path.direct.extend(items)
                su.high = max(su.high, max(st for _, st in items))
            else:
                for rec, stime in items:
                    push(0, STABLE, tid, stime, rec, now)
                    tid += 1
            su.boundary(0, items[-1][1])
            step(now, False)
            for q in queues:
                q.clear()  # what Outputs.flush would encode and send
        assert not scheme.path.failed and svc.stats.tentative == 0, "a failure-free pass went tentative"

    def sunion_only() -> None:
        su = SUnion(1, spec.dpc.bucket, spec.node_delay_s(node), spec.dpc.failure_policy)
        push = su.push
        tid = 0
        for items in batches:
            for rec, stime in items:
                push(0, STABLE, tid, stime, rec, now)
                tid += 1
            su.boundary(0, items[-1][1])
            out = su.poll(now)
            assert all(t.type is STABLE for t in out)

    # SOutput numbers what the operators emit: collect that once, then time the numbering.
    svc = NodeService(spec, node, 0, 0, _settings(), build_scheme)
    produced: list[list] = []
    entry = dpc_scheme(svc).path.entries[0]
    for items in batches:
        entry(items)
        produced.extend(list(v) for v in svc.pipeline.drain().values())
    out_tuples = sum(len(p) for p in produced)

    def soutput_only() -> None:
        so = SOutput()
        out: list = []
        for items in produced:
            so.stable(items, out)
            out.clear()

    ops = _cpu(operators_only, repeat)
    full = _cpu(node_step, repeat)
    su = _cpu(sunion_only, repeat)
    so = _cpu(soutput_only, repeat)
    us = 1e6 / n
    return {
        "tuples": n,
        "batch": batch,
        "output_tuples": out_tuples,
        "bucket_ms": spec.dpc.bucket,
        "operators_us": ops * us,
        "node_step_us": full * us,
        "dpc_overhead_us": (full - ops) * us,
        "sunion_us": su * us,
        "soutput_us": so * us,
    }


def _settings() -> Any:
    from services.core.config import Settings

    return Settings.from_env("localhost:0")  # never connects: the clients are made by run()


def main(argv: list[str] | None = None) -> None:
    from bench.workload import filter_map_spec, reading_records, throughput_window_spec

    ap = argparse.ArgumentParser(prog="python -m bench.dpc_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tuples", type=int, default=200_000)
    a = ap.parse_args(argv)
    records = list(reading_records(a.tuples))
    for name, text in (
        ("filter+map", filter_map_spec("dpcfm", "dpc_in")),
        ("window", throughput_window_spec("dpcw", "dpc_in")),
    ):
        spec = parse_spec(text, source=f"<dpc cost {name}>")
        r = measure(spec, next(iter(spec.nodes)), records)
        print(
            f"{name:<11} operators {r['operators_us']:.2f} µs/tuple, node step {r['node_step_us']:.2f}, "
            f"DPC overhead {r['dpc_overhead_us']:.2f} (SUnion {r['sunion_us']:.2f}, SOutput {r['soutput_us']:.2f})"
        )


if __name__ == "__main__":
    main()
