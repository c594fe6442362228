"""Node services on the real broker produce exactly the reference output, and survive bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from bench.workload import END_OF_TIME
from services.client.source import SourceWriter
from services.client.workload import readings
from services.core.tuples import TupleType, make_headers
from services.operators.reference import canonical, evaluate
from services.spec.topics import restart_topics
from tests.integration.helpers import by_partition, create_topics, read_stream, run_nodes_until_idle, unique_spec

pytestmark = pytest.mark.integration

PIPELINE = """\
name: pipe-{u}
defaults: {partitions: 2}
streams:
  in_{u}: {schema: reading, key: sensor}
  other_{u}: {schema: reading, key: sensor}
  warm_{u}: {schema: reading, key: sensor}
  hot_{u}: {schema: reading, key: sensor}
  stats_{u}: {schema: window_stat, key: key}
  pairs_{u}: {schema: joined, key: key}
operators:
  drop_cold: {type: filter, input: in_{u}, output: warm_{u}, where: "value >= 20"}
  to_f: {type: map, input: warm_{u}, output: hot_{u}, fields: {sensor: sensor, ts: ts, value: "value * 2 + 1", seq: seq}}
  per_sensor: {type: window, input: hot_{u}, output: stats_{u}, key: sensor, size: 400, slide: 200,
               aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
  near: {type: join, left: hot_{u}, right: other_{u}, output: pairs_{u}, key: sensor, within: 30,
         fields: {key: left.sensor, ts: "max(left.ts, right.ts)", left_value: left.value, right_value: right.value}}
nodes:
  ingest: {operators: [drop_cold, to_f]}
  stats: {operators: [per_sensor]}
  joiner: {operators: [near]}
"""


def test_pipeline_output_equals_reference_and_bad_input_is_deadlettered(kafka, tmp_path: Path) -> None:
    spec, _ = unique_spec(PIPELINE, tmp_path)
    u = spec.name.split("-")[1]
    create_topics(spec, kafka.bootstrap)
    src, other = f"in_{u}", f"other_{u}"
    inputs: dict[str, list[list[dict]]] = {src: [[], []], other: [[], []]}
    for stream, seed in ((src, 1), (other, 2)):
        w = SourceWriter(spec, stream, kafka.bootstrap)
        for i, rec in enumerate(readings(3000, sensors=12, seed=seed, step_ms=3)):
            w.send(rec)
            inputs[stream][_partition_of(spec, stream, rec)].append(rec)
            if stream == src and i in (500, 1500):
                w.flush()  # what the writer sent comes first: the garbage takes the next id of partition 0
                _send_garbage(kafka.bootstrap, spec.topic(src), len(inputs[src][0]), w.epoch)
        w.boundary(END_OF_TIME)  # end of input: every bucket and window can close
        w.flush()

    services = run_nodes_until_idle(spec, kafka.bootstrap)

    want = evaluate(spec, inputs)
    # A node keeps each partition in time order, so the window downstream never sees a late tuple.
    hot = by_partition(read_stream(spec, f"hot_{u}", kafka.bootstrap, expect=sum(map(len, want[f"hot_{u}"]))), 2)
    for p in range(2):
        times = [t.meta.stime for t in hot[p]]
        assert times == sorted(times), f"hot partition {p} is out of time order"
    late = {name: [getattr(op, "late", 0) for op in svc.pipeline.operators] for name, svc in services.items()}
    assert all(n == 0 for counts in late.values() for n in counts), f"late tuples: {late}"
    for stream, ordered in ((f"hot_{u}", True), (f"stats_{u}", True), (f"pairs_{u}", False)):
        n = sum(len(p) for p in want[stream])
        got = by_partition(read_stream(spec, stream, kafka.bootstrap, expect=n), 2)
        for p in range(2):
            recs = [t.value for t in got[p]]
            if stream.startswith("stats"):
                # The end-of-input boundary also closes the windows past the last tuple's time,
                # which the reference (closing up to the last time it saw) leaves open.
                last = max(r["ts"] for r in inputs[src][p])
                assert all(r["window_end"] > last for r in recs[len(want[stream][p]) :])
                recs = recs[: len(want[stream][p])]
            if ordered:
                assert recs == want[stream][p], f"{stream} partition {p} differs from the reference"
            else:
                assert canonical(recs) == canonical(want[stream][p]), f"{stream} partition {p} differs"
            assert [t.meta.id for t in got[p]] == list(range(len(got[p]))), "tuple ids must be dense from 0"
            assert all(t.meta.type is TupleType.STABLE for t in got[p])
        if stream.startswith("stats"):
            assert all(t.meta.stime == t.value["window_end"] for part in got for t in part)
        assert n > 0

    dead = _read_raw(kafka.bootstrap, spec.deadletter_topic, 4)
    reasons = sorted(dict(m.headers())["ht.error"].decode() for m in dead)
    assert len(dead) == 4
    assert sum("not valid Avro" in r for r in reasons) == 2 and sum("missing ht header" in r for r in reasons) == 2
    for m in dead:
        h = dict(m.headers())
        assert h["ht.src.topic"].decode() == spec.topic(src) and int(h["ht.src.offset"]) >= 0
    assert sum(s.stats.deadlettered for s in services.values()) == 4


def _partition_of(spec, stream: str, rec: dict) -> int:
    from services.core.partitioner import key_bytes, partition_for

    return partition_for(key_bytes(rec["sensor"]), spec.streams[stream].partitions)


def _send_garbage(bootstrap: str, topic: str, next_id: int, epoch: int) -> None:
    """Two bad messages: a payload that is not Avro (with the writer's next id and epoch, so only
    its payload is wrong), and a valid-looking one without the ht header."""
    p = Producer({"bootstrap.servers": bootstrap})
    headers = make_headers(TupleType.STABLE, next_id, 0, epoch=epoch)
    p.produce(topic, b"\xff\xfe not avro", b"s1", partition=0, headers=headers)
    p.produce(topic, b"\x02a\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00", b"s1", partition=1)
    p.flush()


def _read_raw(bootstrap: str, topic: str, n: int, timeout: float = 30) -> list:
    import time

    from confluent_kafka import Consumer, Message, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += [m for m in c.consume(100, 0.5) if m.error() is None]
    c.close()
    return got


CRASH = """\
name: crash-{u}
dpc: {restart_image_interval: 100}
streams:
  in_{u}: {schema: reading, key: sensor}
  out_{u}: {schema: reading, key: sensor}
operators:
  keep: {type: filter, input: in_{u}, output: out_{u}, where: "True"}
nodes:
  n: {operators: [keep]}
"""


def test_a_node_that_dies_on_a_delivery_error_persists_nothing_past_what_it_wrote(kafka, tmp_path: Path) -> None:
    """The output topic refuses a record (too large): the node must die without a restart image
    claiming that record, or the restart would continue after a gap in the stable ids."""
    import threading
    import time

    from services.core.admin import TopicSpec, ensure_topics
    from services.core.config import Settings
    from services.deploy.topics import topic_specs
    from services.node import restart
    from services.node.loop import NodeService
    from services.schemes import build_scheme

    spec, _ = unique_spec(CRASH, tmp_path)
    u = spec.name.split("-")[1]
    out_topic = next(iter(spec.stream_topics(f"out_{u}")))
    ensure_topics(kafka.bootstrap, [TopicSpec(out_topic, 1, 1, {"max.message.bytes": "20000"})])
    ensure_topics(kafka.bootstrap, topic_specs(spec))
    w = SourceWriter(spec, f"in_{u}", kafka.bootstrap)
    for rec in readings(50, sensors=3, seed=1, step_ms=3, start_ms=0):
        w.send(rec)
    w.boundary(10_000)
    w.flush()
    svc = NodeService(spec, "n", 0, 0, Settings(bootstrap=kafka.bootstrap), build_scheme)
    died: list[BaseException] = []

    def run() -> None:
        try:
            svc.run()
        except BaseException as e:  # noqa: BLE001 - the test wants to see it
            died.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while (svc.stats.restart_images < 2 or svc.outputs.produced < 50) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert svc.stats.restart_images >= 2, "the node wrote no restart image while healthy"
    import random

    noise = "".join(random.Random(1).choices("abcdefghijklmnopqrstuvwxyz0123456789", k=50_000))  # lz4 cannot shrink it
    poison = dict(next(iter(readings(1, sensors=1, seed=2))), sensor=noise, ts=20_000)
    w.send(poison)
    for rec in readings(10, sensors=3, seed=3, step_ms=3, start_ms=20_001):
        w.send(rec)
    w.boundary(30_000)
    w.flush()
    t.join(timeout=60)
    assert not t.is_alive() and died, "a delivery error must stop the node"
    written = [x for x in read_stream(spec, f"out_{u}", kafka.bootstrap) if x.meta.type is TupleType.STABLE]
    assert [x.meta.id for x in written] == list(range(50))
    image = restart.load(kafka.bootstrap, restart_topics(spec)[0][0], 0)
    assert image is not None
    next_id, _ = image.outputs[f"out_{u}"]
    assert next_id <= len(written), (
        f"the restart image claims ids up to {next_id - 1}, but only {len(written)} were written"
    )


def test_a_restart_whose_input_was_trimmed_refuses_to_start_in_one_line(kafka, tmp_path: Path) -> None:
    """Its restart image needs input that retention removed: replaying what is left would number
    other tuples with the ids already written, so the node must refuse, saying why."""
    from services.core.config import Settings
    from services.core.errors import RestartImageError
    from services.log.trim import trim_before
    from services.node.loop import NodeService
    from services.schemes import build_scheme

    spec, _ = unique_spec(CRASH, tmp_path)
    u = spec.name.split("-")[1]
    create_topics(spec, kafka.bootstrap)
    w = SourceWriter(spec, f"in_{u}", kafka.bootstrap)
    for rec in readings(100, sensors=3, seed=1, step_ms=3, start_ms=0):
        w.send(rec)
    w.boundary(1_000)
    w.flush()
    settings = Settings(bootstrap=kafka.bootstrap)
    first = NodeService(spec, "n", 0, 0, settings, build_scheme)
    first.run(max_idle_s=2)  # a clean stop: its image says "go on after input offset ~101"
    assert first.stats.restart_images >= 1
    for rec in readings(50, sensors=3, seed=2, step_ms=3, start_ms=2_000):
        w.send(rec)
    w.boundary(3_000)
    w.flush()
    in_topic = spec.topic(f"in_{u}")
    assert trim_before(kafka.bootstrap, in_topic, 0, 130) == 130  # retention took input the restart needs
    with pytest.raises(RestartImageError, match=r"log now starts at 130") as e:
        NodeService(spec, "n", 0, 0, settings, build_scheme).run(max_idle_s=2)
    assert "\n" not in str(e.value)
