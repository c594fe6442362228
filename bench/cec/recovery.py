"""One CEC run on a real broker up to a crash point, and the recovery figures there."""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from services.cec.checkpointer import Checkpointer
from services.cec.intensity import Intensity
from services.cec.outlog import TOPIC_CONFIG, OutLog, eventual
from services.core.admin import TopicSpec, delete_topics, ensure_topics
from services.core.codec import codec_for
from services.core.transactions import TransactionalProducer
from services.operators.count_window import CountWindow
from services.spec import Aggregate

AGGS = tuple(
    Aggregate(out, func, None if func == "count" else "value")
    for out, func in (("count", "count"), ("sum", "sum"), ("avg", "avg"), ("min", "min"), ("max", "max"))
)


@dataclass(frozen=True)
class Workload:
    """The paper's: uniformly random item ids, a price per tuple, count windows of ``window``."""

    items: int = 100_000
    tuples: int = 1_000_000
    window: int = 10
    batch: int = 500  # input tuples per transaction
    seed: int = 5

    def records(self) -> list[dict[str, Any]]:
        rnd = random.Random(self.seed)
        return [
            {"sensor": f"item{rnd.randrange(self.items)}", "ts": i, "value": float(rnd.randrange(1, 1000)), "seq": i}
            for i in range(self.tuples)
        ]


def sizes(recs: list[dict[str, Any]]) -> list[int]:
    """Each input tuple's encoded size (the 'reading' schema): what a replay of it reads."""
    encode = codec_for("reading").encode
    return [len(encode(r)) for r in recs]


def _window(w: Workload) -> CountWindow:
    return CountWindow("avg_price", "sensor", "ts", w.window, AGGS)


def run(bootstrap: str, w: Workload, policy: Intensity, recs: list[dict[str, Any]], size: list[int]) -> dict[str, Any]:
    """Feed ``recs`` through CEC into a fresh topic; at their end (the crash point) read the eventual
    checkpoint back and load it into a fresh operator: the figures of that point."""
    tag = uuid.uuid4().hex[:8]
    topic = f"bench.cec.{tag}"
    ensure_topics(bootstrap, [TopicSpec(topic, 1, 1, TOPIC_CONFIG)])
    producer = TransactionalProducer(bootstrap, f"bench-cec-{tag}")
    try:
        producer.init()
        cp = Checkpointer(_window(w), policy)
        log = OutLog(producer, topic, 0, "window_stat", "avg_price")
        t0 = time.perf_counter()
        for pos in range(0, len(recs), w.batch):
            outs = cp.push(pos, [(r, r["ts"]) for r in recs[pos : pos + w.batch]])
            outs += cp.background(_ms(), _ms)
            producer.begin()
            log.write(outs)
            producer.commit()
        run_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        ec = eventual(bootstrap, topic, 0)
        start = Checkpointer(_window(w), policy).load(ec)
        load_s = time.perf_counter() - t1
        return {
            "q": policy.q,
            "u": policy.u,
            "openwins": len(cp.fp),
            "checks": cp.checks,
            "records": cp.seq,
            "extent": ec.read,
            "ec_load_s": load_s,
            "replay_tuples": len(recs) - 1 - start,
            "replay_bytes": sum(size[start + 1 :]),
            "tuples_per_s": len(recs) / run_s,
        }
    finally:
        producer.close()
        delete_topics(bootstrap, [topic])


def _ms() -> int:
    return int(time.monotonic() * 1000)
