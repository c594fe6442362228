"""An outside client's view: a stream whose schema lives beside the spec, read back by a plain
confluent-kafka consumer with nothing but ``hastream schema`` (the README's recipe)."""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Consumer, TopicPartition

from services.client.source import END_OF_TIME
from services.operators.reference import evaluate
from services.spec import load_spec
from tests.integration.helpers import hastream, user_env

pytestmark = pytest.mark.integration

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "customer", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "amount", "type": "double"},
    ],
}

SPEC = """\
name: shop-{u}
schemas: my_schemas
streams:
  orders_{u}: {schema: order_{u}, key: customer}
  big_{u}: {schema: order_{u}, key: customer}
operators:
  big: {type: filter, input: orders_{u}, output: big_{u}, where: "amount >= 50"}
nodes:
  picker: {operators: [big]}
"""


def _read_plain(bootstrap: str, topic: str, timeout: float = 60) -> list[tuple[list[bytes], bytes | None]]:
    """The README's recipe: a plain consumer, from the start to the stream's final boundary (a
    BOUNDARY record, or a bound riding on a STABLE one, at the end of time). Each message as the
    fields of its ``ht`` header (``TYPE,id,stime,replica,epoch,schema[,bound]``) and its value."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "outside", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[list[bytes], bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if m.error() is not None:
                    continue
                ht = dict(m.headers() or []).get("ht")
                f = ht.split(b",") if isinstance(ht, bytes) else []
                got.append((f, m.value()))
                bound = f[2] if f[:1] == [b"BOUNDARY"] else f[6] if f[:1] == [b"STABLE"] and len(f) == 7 else None
                if bound is not None and int(bound) >= END_OF_TIME - 1000:
                    return got
    finally:
        c.close()
    raise AssertionError(f"{topic}: the final boundary did not come in {timeout}s ({len(got)} messages)")


def test_a_user_schema_beside_the_spec_and_a_plain_consumer_reading_the_output(kafka, tmp_path: Path) -> None:
    u = uuid.uuid4().hex[:8]
    (tmp_path / "my_schemas").mkdir()
    (tmp_path / "my_schemas" / f"order_{u}.avsc").write_text(json.dumps(ORDER))
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("{u}", u))
    u_spec = load_spec(path)
    env = user_env(tmp_path / "home")  # the deployment's own record must be enough for later commands
    orders = [{"customer": f"c{i % 3}", "ts": 1_000 + 10 * i, "amount": float(i % 100)} for i in range(300)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(o) + "\n" for o in orders))

    printed = hastream("schema", str(path), f"big_{u}", env=env)
    assert printed.returncode == 0, printed.stderr
    schema = fastavro.parse_schema(json.loads(printed.stdout))
    header = hastream("schema", str(path), f"big_{u}", "--header", env=env).stdout.strip()
    assert header.startswith(f"order_{u}:") and len(header.split(":")[1]) == 16

    r = hastream("up", str(path), "--bootstrap", kafka.bootstrap, env=env)
    assert r.returncode == 0, r.stderr
    try:
        r = hastream("produce", str(path), f"orders_{u}", "--json", str(tmp_path / "in.jsonl"), env=env)
        assert r.returncode == 0, r.stderr
        want = evaluate(u_spec, {f"orders_{u}": [orders]}, ended=True)[f"big_{u}"][0]
        msgs = _read_plain(kafka.bootstrap, u_spec.topic(f"big_{u}", 0))
    finally:
        hastream("down", u_spec.name, env=env)

    assert all(f[5] == header.encode() for f, _ in msgs), "every message names its schema"
    stable = [(f, value) for f, value in msgs if f[0] == b"STABLE"]
    decoded = [fastavro.schemaless_reader(io.BytesIO(value or b""), schema, None) for _, value in stable]
    assert decoded == want
    assert [int(f[1]) for f, _ in stable] == list(range(len(want)))
