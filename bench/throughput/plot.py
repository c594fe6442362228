"""The figure of a run's results: each processor's throughput and latency beside the bare loop's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.throughput.jobs import PEERS


def plot(doc: dict[str, Any], path: Path) -> None:
    """Throughput and latency of each processor beside the bare loop, with the workload stated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = doc["results"]
    names = list(res)
    colours = ["#888888" if n in ("bare", "avro") else "#e08a2c" if n in PEERS else "#2a7ab9" for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.6))
    tps = [res[n]["tuples_per_s"] / 1000 for n in names]
    bars = a.bar(names, tps, color=colours)
    for bar, n in zip(bars, names, strict=True):
        a.annotate(
            f"{res[n]['tuples_per_s'] / 1000:.1f}k\n{res[n]['ratio']:.2f}x",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    a.tick_params(axis="x", labelrotation=20)
    a.set_ylabel("input tuples/s (thousands)")
    a.set_title("throughput, pre-loaded input")
    a.set_ylim(0, max(tps) * 1.25)
    lat = [n for n in names if res[n].get("latency")]
    x = range(len(lat))
    for off, q, colour in ((-0.2, "p50", "#2a7ab9"), (0.2, "p99", "#7fb3d9")):
        vals = [res[n]["latency"][f"{q}_ms"] for n in lat]
        for bar, v in zip(b.bar([i + off for i in x], vals, width=0.4, label=q, color=colour), vals, strict=True):
            b.annotate(
                f"{v:.0f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8
            )
    b.set_xticks(list(x), lat, rotation=20)
    b.set_ylabel("end-to-end latency (ms)")
    b.set_title(f"latency at {doc['config']['paced_rate']:,} tuples/s")
    b.set_ylim(0, max(res[n]["latency"]["p99_ms"] for n in lat) * 1.35)
    b.legend(loc="upper left", ncols=2)
    m, c = doc["machine"], doc["config"]
    d = c.get("dpc", {})
    fig.suptitle(
        f"hastream nodes (blue; DPC, failure-free, bucket {d.get('bucket_ms')} ms) vs bare confluent-kafka "
        f"loops (grey: bytes only, and Avro filter+map by hand) and Quix Streams (orange)\n"
        f"{c['tuples']:,} reading tuples, 1 partition, batch {c['batch_size']}; "
        f"{m['cores']} cores, Python {m['python']}, Kafka {m['kafka']} ({m['broker']})",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
