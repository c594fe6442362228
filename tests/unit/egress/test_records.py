"""The plain records of an egress: the key a partitioner expects, a value any client decodes, the id readable."""

from __future__ import annotations

import io
import json

from fastavro import parse_schema, schemaless_reader

from services.core.codec import schema_file
from services.core.partitioner import partition_for
from services.egress.records import ID_HEADER, STIME_HEADER, PlainRecords, record_id

REC = {"sensor": "s7", "ts": 1200, "value": 2.5, "seq": 41}


def test_a_json_record_is_the_tuple_keyed_by_its_key_field_with_its_id_and_time_in_headers() -> None:
    key, value, headers = PlainRecords("reading", "sensor", "json").record(41, 1201, REC)
    assert key == b"s7" and partition_for(key, 4) == partition_for(b"s7", 4)
    assert json.loads(value) == REC
    assert headers == [(ID_HEADER, b"41"), (STIME_HEADER, b"1201")]
    assert record_id(headers) == 41


def test_an_avro_record_decodes_with_the_streams_schema_alone() -> None:
    """A consumer outside hastream reads the value with the .avsc file and fastavro, nothing else."""
    _, value, _ = PlainRecords("reading", "sensor", "avro").record(0, 0, REC)
    schema = parse_schema(json.loads(schema_file("reading").read_text()))
    assert schemaless_reader(io.BytesIO(value), schema) == REC


def test_an_unkeyed_stream_writes_unkeyed_records() -> None:
    key, _, _ = PlainRecords("reading", None, "json").record(0, 0, REC)
    assert key is None


def test_a_record_an_egress_did_not_write_has_no_id() -> None:
    assert record_id(None) is None and record_id([("other", b"1")]) is None
    assert record_id([(ID_HEADER, b"x")]) is None


def test_json_values_are_the_bytes_json_dumps_gives() -> None:
    """The egress's JSON encoder, made once, writes what ``json.dumps`` with compact separators writes:
    escapes, non-ASCII, floats (NaN, -0.0, large), None, lists and big integers alike."""
    import json

    from services.client.workload import readings
    from services.egress.records import _json

    odd = {"a": 'é"\\ \n', "b": None, "c": 1e300, "d": float("nan"), "e": -0.0, "f": [1, 2.5], "g": True, "h": 10**20}
    for rec in [*readings(500, sensors=6, seed=1), odd]:
        assert _json(rec) == json.dumps(rec, separators=(",", ":")).encode()
