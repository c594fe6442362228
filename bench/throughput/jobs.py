"""What a processor run is: the job a worker process is given, its topics and names, and the JSON
lines the worker reports on stdout. The harness side (``worker.Worker``, ``phases.Bench``) and the
worker side (``processors``) share it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.workload import END_OF_TIME, filter_map_spec, throughput_window_spec
from services.core.admin import TopicSpec
from services.core.paths import hastream_home
from services.deploy.topics import topic_specs
from services.spec import Spec, parse_spec

TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}
PROCESSORS = ("bare", "avro", "filter+map", "window", "quix filter+map", "quix window")
LATENCY_PROCESSORS = PROCESSORS
PEERS = ("quix filter+map", "quix window")  # run in their own virtualenv (``peers_python``)
EOS_PEER = "quix filter+map eos"  # Quix's filter+map with processing_guarantee="exactly-once" (bench/egress.py)
PEERS_VENV = "peers"  # under HASTREAM_HOME: `make peers` installs Quix Streams there
FINAL_BOUNDARY = END_OF_TIME  # the sources' last BOUNDARY: nothing more will come, every bucket is complete


@dataclass
class Job:
    """One processor run: what the worker process needs to know."""

    kind: str  # "bare" or "node"
    bootstrap: str
    in_topic: str
    out_topic: str
    group: str
    stop_after: int
    idle_s: float
    spec_text: str = ""
    node: str = ""
    profile_out: str = ""
    passthrough: bool = False  # replace SUnion with a union that does not serialize (PassThroughUnion)
    serialize: bool = False  # serialize the one input by buckets, as the paper's SUnion does every input
    window: bool = False  # a peer's job: the window rather than filter+map
    eos: bool = False  # a peer's job: exactly-once (Kafka transactions) rather than at-least-once
    state_dir: str = ""  # a peer's local state
    schema: str = "reading"  # a peer's input schema
    group_by: str = ""  # a peer's window: re-key by this field first (Quix's group_by, a repartition topic)
    finals: int = 1  # a peer stops after this many final boundaries (one per input partition)


def peers_python() -> Path | None:
    """The Python of the peers' virtualenv (Quix Streams), or None if it is not installed."""
    py = hastream_home() / PEERS_VENV / "bin" / "python"
    return py if py.exists() else None


def is_window(processor: str) -> bool:
    return processor.endswith("window")


def make_job(
    processor: str,
    tag: str,
    source: str,
    bootstrap: str,
    stop_after: int,
    idle_s: float,
    bucket_ms: int | None = None,
    passthrough: bool = False,
    serialize: bool = False,
) -> tuple[Job, Spec | None]:
    """A job for ``processor`` reading topic ``source``, with names unique to ``tag``; a node's
    SUnion buckets and boundary interval are ``bucket_ms`` if given, and ``passthrough`` takes
    SUnion's serialization out."""
    if processor in ("bare", "avro"):
        return Job(processor, bootstrap, source, f"{tag}_out", f"bench.{tag}", stop_after, idle_s), None
    if processor in PEERS or processor == EOS_PEER:
        job = Job("quix", bootstrap, source, f"{tag}_out", f"bench.{tag}", stop_after, idle_s)
        job.window, job.eos = is_window(processor), processor == EOS_PEER
        return job, None
    make = filter_map_spec if processor == "filter+map" else throughput_window_spec
    text = make(tag, source, bucket_ms)
    spec = parse_spec(text, source=f"<bench {tag}>")
    node = next(iter(spec.nodes))
    out_topic = spec.topic(spec.node_outputs(node)[0], 0)
    job = Job("node", bootstrap, source, out_topic, "", stop_after, idle_s, text, node, passthrough=passthrough)
    job.serialize = serialize
    return job, spec


def slug(processor: str) -> str:
    """A processor's name as part of a topic name."""
    return processor.replace("+", "").replace(" ", "_")


def variant_name(bucket_ms: int | None, passthrough: bool) -> str:
    """A short name for a node variant, for topic names and labels ("" for the defaults)."""
    return ("plain" if passthrough else "") + (f"b{bucket_ms}" if bucket_ms else "")


def topics_of(job: Job, spec: Spec | None) -> list[TopicSpec]:
    """What ``services.deploy.topics.provision`` creates for the spec (its heartbeat, control,
    dead-letter and checkpoint topics too), all with broker append times."""
    if spec is None:
        return [TopicSpec(t, 1, 1, dict(TOPIC_CONFIG)) for t in (job.in_topic, job.out_topic)]
    return topic_specs(spec, 1, TOPIC_CONFIG)


def report(kind: str, **data: Any) -> None:
    """One JSON line of the worker's report on stdout: "ready", "progress" or "done"."""
    print(json.dumps({"ev": kind, **data}), flush=True)
