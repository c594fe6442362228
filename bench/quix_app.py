"""The benchmark's filter+map and window written as a Quix Streams application, for comparison.

Runs in its own virtualenv (Quix Streams pins a confluent-kafka older than hastream's), so it
imports nothing of hastream: the job comes as JSON on the command line, the Avro schemas as
files, and it reports on stdout in the JSON lines ``bench.throughput``'s workers write.
It reads the same input topic as the hastream node (Avro ``reading`` values with the ``ht``
headers, BOUNDARY messages without a value, which it skips) and writes Avro records, one per
result: a ``reading`` per input tuple for filter+map, a ``window_stat`` per closed window.
Event time is the reading's ``ts`` field, as in hastream.
"""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import fastavro
from quixstreams import Application
from quixstreams.dataframe.windows import Count, Max, Mean, Min, Sum
from quixstreams.models.serializers import Deserializer, Serializer

FINAL_STIME = b"%d" % 2**62  # the stime of the source's last BOUNDARY: stop there


def _is_final(headers: Any) -> bool:
    """The source's last BOUNDARY: its ``ht`` header (TYPE,id,stime,...) names stime 2**62."""
    return any(k == "ht" and v.split(b",")[:3:2] == [b"BOUNDARY", FINAL_STIME] for k, v in headers or ())


def _report(kind: str, **data: Any) -> None:
    print(json.dumps({"ev": kind, **data}), flush=True)


class AvroIn(Deserializer):
    def __init__(self, schema: Any) -> None:
        super().__init__()
        self.schema = schema

    def __call__(self, value: bytes, ctx: Any) -> Any:
        return fastavro.schemaless_reader(io.BytesIO(value), self.schema, None)


class AvroOut(Serializer):
    def __init__(self, schema: Any) -> None:
        super().__init__()
        self.schema = schema

    def __call__(self, value: Any, ctx: Any) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self.schema, value)
        return buf.getvalue()


def main(raw: str) -> None:
    job = json.loads(raw)
    schemas = Path(job["schemas"])
    reading = fastavro.parse_schema(json.loads((schemas / f"{job.get('schema', 'reading')}.avsc").read_text()))
    stat = fastavro.parse_schema(json.loads((schemas / "window_stat.avsc").read_text()))
    app = Application(
        broker_address=job["bootstrap"],
        consumer_group=job["group"],
        auto_offset_reset="earliest",
        state_dir=job["state_dir"],
        use_changelog_topics=False,
        loglevel="WARNING",
        processing_guarantee="exactly-once" if job.get("eos") else "at-least-once",
    )
    topic_in = app.topic(
        job["in_topic"],
        value_deserializer=AvroIn(reading),
        timestamp_extractor=lambda value, headers, ts, ttype: value["ts"] if value else ts,
    )
    topic_out = app.topic(job["out_topic"], value_serializer=AvroOut(stat if job["window"] else reading))
    seen: dict[str, Any] = {"consumed": 0, "first_at": None, "last_at": None, "report": 0.0, "finals": 0}

    def count(value: Any, key: Any, timestamp: int, headers: Any) -> None:
        """Every message, boundaries included, as the hastream node counts its input."""
        now = time.time()
        if seen["first_at"] is None:
            seen["first_at"] = now
        seen["consumed"] += 1
        if now - seen["report"] > 0.2:
            _report("progress", consumed=seen["consumed"])
            seen["report"] = now
        if value is None and _is_final(headers):
            seen["finals"] += 1
        if seen["finals"] >= job.get("finals", 1) or seen["consumed"] >= job["stop_after"]:
            seen["last_at"] = now
            app.stop()

    sdf = app.dataframe(topic_in)
    if job.get("group_by"):  # re-keyed through Quix's repartition topic first, as hastream's exchange re-keys
        field = job["group_by"]
        sdf = sdf.group_by(lambda v: v[field] if v else "", name=field)  # a boundary (no value) goes along
    sdf = sdf.update(count, metadata=True)
    sdf = sdf.filter(lambda v: v is not None)
    if job["window"]:
        sdf = (
            sdf.hopping_window(duration_ms=job["size"], step_ms=job["slide"])
            .agg(count=Count(), sum=Sum("value"), avg=Mean("value"), min=Min("value"), max=Max("value"))
            .final()
        )
        sdf = sdf.apply(
            lambda w, key, ts, headers: {
                "key": key.decode() if isinstance(key, bytes) else str(key),
                "window_start": w["start"],
                "window_end": w["end"],
                "count": w["count"],
                "sum": float(w["sum"]),
                "avg": float(w["avg"]),
                "min": float(w["min"]),
                "max": float(w["max"]),
            },
            metadata=True,
        )
    else:
        sdf = sdf.filter(lambda r: r["value"] > -1000)
        sdf = sdf.apply(
            lambda r: {"sensor": r["sensor"], "ts": r["ts"], "value": r["value"] * 1.8 + 32, "seq": r["seq"]}
        )
    sdf.to_topic(topic_out)
    assigned = app._on_assign  # ready once the input is assigned, as the other workers say

    def on_assign(consumer: Any, partitions: Any) -> None:
        assigned(consumer, partitions)
        _report("ready")

    app._on_assign = on_assign
    cpu0 = time.process_time()
    app.run()
    _report(
        "done",
        consumed=seen["consumed"],
        first_at=seen["first_at"],
        last_at=seen["last_at"] or time.time(),
        cpu_s=time.process_time() - cpu0,
    )


if __name__ == "__main__":
    main(sys.argv[1])
