"""The plain records an egress writes: what any Kafka consumer expects of a topic, and nothing else.

Each stable tuple becomes one record: the stream's key field as the record key (as hastream's
sources and nodes key theirs, so a record lands in the partition its key maps to), the tuple as
the value (a JSON object, or schemaless Avro in the stream's schema with ``format: avro``), and
its id and tuple time in two headers for a consumer that wants them. The id header is also where
a new egress primary finds where to go on (``services.egress.position``).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from services.core.codec import codec_for
from services.core.partitioner import key_bytes
from services.core.tuples import RawHeaders

ID_HEADER = "hastream.id"
STIME_HEADER = "hastream.stime"

PlainHeaders = list[tuple[str, str | bytes | None]]


def _json_encoder() -> Callable[[dict[str, Any]], bytes]:
    """``json.dumps(rec, separators=(",", ":")).encode()``, the same bytes, with the encoder made once:
    ``dumps`` builds a ``JSONEncoder`` and its C encoder for every record, a third of an egress's
    time per tuple."""
    enc = json.JSONEncoder(separators=(",", ":"), check_circular=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return lambda rec: enc.encode(rec).encode()
    c = make(None, enc.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
    return lambda rec: "".join(c(rec, 0)).encode()


_json = _json_encoder()


class PlainRecords:
    """Turns a stream's tuples into plain records: (key, value, headers)."""

    def __init__(self, schema: str, key: str | None, fmt: str) -> None:
        self.key = key
        self.encode: Callable[[dict[str, Any]], bytes] = _json if fmt == "json" else codec_for(schema).encode

    def record(self, tid: int, stime: int, rec: dict[str, Any]) -> tuple[bytes | None, bytes, PlainHeaders]:
        key = key_bytes(rec[self.key]) if self.key is not None else None
        return key, self.encode(rec), [(ID_HEADER, b"%d" % tid), (STIME_HEADER, b"%d" % stime)]


def record_id(headers: RawHeaders) -> int | None:
    """The tuple id a plain record carries (None: not one an egress wrote)."""
    pairs = headers.items() if isinstance(headers, dict) else headers or ()
    for name, value in pairs:
        if name == ID_HEADER and value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None
