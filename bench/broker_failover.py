"""How long a partition stops taking and delivering tuples when its leader broker is killed.

    python -m bench.broker_failover [--trials N]

On a fresh embedded 3-broker cluster (replication 3, min.insync.replicas 2), a producer and a
consumer built as the services build theirs (``services.core.kafka``) exchange a tuple every
10 ms on one partition. Each trial kills the partition's leader with kill -9 and measures,
from the kill, when the first tuple sent after it is acknowledged (``produce_s``) and when it
is received (``consume_s``); then the broker is started again and the partition's replicas
are given time to catch up. docs/dpc.md's delay budget uses these figures; the results go to
``bench/results/broker_failover.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Message, TopicPartition

from infra.kafka.cluster import KafkaCluster
from services.core.admin import TopicSpec, admin_client, ensure_topics
from services.core.kafka import BatchConsumer, BatchProducer

RESULTS = Path(__file__).resolve().parent / "results" / "broker_failover.json"


@dataclass
class Failover:
    produce_s: float  # kill -> first tuple sent after it acknowledged
    consume_s: float  # kill -> first tuple sent after it received


class Exchange:
    """A producer sending its send time every ``interval`` s to one partition and a consumer
    noting when acknowledgements and tuples arrive, each in its own thread."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.01) -> None:
        self.topic, self.interval = topic, interval
        self.producer = BatchProducer(bootstrap, **{"delivery.report.only.error": False})
        self.consumer = BatchConsumer(bootstrap, f"failover-{uuid.uuid4().hex[:8]}")
        self.consumer.assign_offsets([TopicPartition(topic, 0, 0)])
        self.acked: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic
        self.received: list[tuple[float, float]] = []  # (sent, received)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._produce, self._consume)]
        for t in self._threads:
            t.start()

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.acked.append((float(msg.value() or b"0"), time.monotonic()))

    def _produce(self) -> None:
        while not self._stop.is_set():
            self.producer.raw.produce(self.topic, str(time.monotonic()).encode(), on_delivery=self._on_delivery)
            self.producer.poll(self.interval)

    def _consume(self) -> None:
        while not self._stop.is_set():
            for m in self.consumer.poll_batch(500, 0.05):
                self.received.append((float(m.value() or b"0"), time.monotonic()))

    def first_after(self, t0: float, timeout: float = 60) -> Failover:
        """When the first tuple sent at or after ``t0`` was acknowledged and received."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            acked = [a for s, a in list(self.acked) if s >= t0]
            got = [r for s, r in list(self.received) if s >= t0]
            if acked and got:
                return Failover(round(min(acked) - t0, 3), round(min(got) - t0, 3))
            time.sleep(0.02)
        raise TimeoutError(f"no tuple sent after the kill got through within {timeout:g}s")

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        self.producer.raw.flush(5)
        self.consumer.close()


def leader(bootstrap: str, topic: str) -> int:
    return admin_client(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[0].leader


def wait_in_sync(bootstrap: str, topic: str, replicas: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(admin_client(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[0].isrs) == replicas:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{topic} did not get {replicas} in-sync replicas within {timeout:g}s")


def kill_leader(cluster: KafkaCluster, topic: str, ex: Exchange) -> tuple[int, Failover]:
    """Kill the partition's leader while the exchange runs; the broker index and the fail-over."""
    wait_in_sync(cluster.bootstrap, topic, 3)
    time.sleep(1)  # steady exchange before the kill
    victim = leader(cluster.bootstrap, topic)
    t0 = time.monotonic()
    cluster.kill_broker(victim)
    return victim, ex.first_after(t0)


def measure(cluster: KafkaCluster, trials: int = 3) -> list[Failover]:
    """``trials`` leader kills on one partition of ``cluster``, each broker started again after."""
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    ensure_topics(cluster.bootstrap, [TopicSpec(topic, 1, 3, {"min.insync.replicas": "2"})])
    ex = Exchange(cluster.bootstrap, topic)
    out = []
    try:
        for _ in range(trials):
            victim, f = kill_leader(cluster, topic, ex)
            out.append(f)
            print(f"broker {victim} killed: produce resumed after {f.produce_s:.2f}s, consume after {f.consume_s:.2f}s")
            cluster.start_broker(victim)
    finally:
        ex.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.broker_failover", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args(argv)
    logging.getLogger("hastream.librdkafka").setLevel(logging.ERROR)  # refused connections to the dead broker
    logging.getLogger("services.core.kafka").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as d, KafkaCluster(brokers=3, data_dir=Path(d)) as cluster:
        runs = measure(cluster, a.trials)
    summary = {
        k: {"median": statistics.median(v), "max": max(v)}
        for k, v in (("produce_s", [r.produce_s for r in runs]), ("consume_s", [r.consume_s for r in runs]))
    }
    RESULTS.write_text(json.dumps({"trials": [asdict(r) for r in runs], **summary}, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
