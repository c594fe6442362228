"""Avro encoding of tuple payloads with fastavro, from schemas parsed once.

Schemas live in ``schemas/<name>.avsc``; a codec is built per schema and reused, so no
message ever pays for schema parsing.
"""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.types import Schema

from services.core.errors import DecodeError, SchemaNotFound
from services.core.paths import SCHEMA_DIR


def available_schemas(schema_dir: Path = SCHEMA_DIR) -> list[str]:
    return sorted(p.stem for p in schema_dir.glob("*.avsc"))


@cache
def load_schema(name: str, schema_dir: Path = SCHEMA_DIR) -> Schema:
    """Parsed schema by name (file stem), cached for the process."""
    path = schema_dir / f"{name}.avsc"
    if not path.exists():
        raise SchemaNotFound(f"no schema '{name}' (known: {', '.join(available_schemas(schema_dir))})")
    return fastavro.parse_schema(json.loads(path.read_text()))


def schema_json(name: str, schema_dir: Path = SCHEMA_DIR) -> str:
    """The schema's JSON text (what Spark's from_avro/to_avro take)."""
    return (schema_dir / f"{name}.avsc").read_text()


def schema_fields(name: str) -> dict[str, Any]:
    """Field name -> Avro type of a record schema."""
    return {f["name"]: f["type"] for f in record_fields(name)}


def record_fields(name: str) -> list[dict[str, Any]]:
    """The field definitions of a record schema, as parsed."""
    schema: Any = load_schema(name)
    return list(schema["fields"])


# What encoding a record that does not fit its schema raises (a None or a string for a double, a missing field).
ENCODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, ArithmeticError)


class Codec:
    """Schemaless Avro encoder/decoder for one parsed schema; safe to share between threads."""

    __slots__ = ("name", "schema")

    def __init__(self, name: str) -> None:
        self.name = name
        self.schema = load_schema(name)

    def encode(self, record: dict[str, Any]) -> bytes:
        # A buffer per call: a shared one lets concurrent threads interleave their writes.
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self.schema, record)
        return buf.getvalue()

    def decode(self, payload: bytes | None) -> dict[str, Any]:
        """Decode; raises DecodeError for bytes that are not this schema's Avro."""
        if payload is None:
            raise DecodeError("empty message value")
        bio = io.BytesIO(payload)
        try:
            rec = fastavro.schemaless_reader(bio, self.schema, None)
        except Exception as e:  # fastavro raises many types on garbage input
            raise DecodeError(f"not valid Avro for schema '{self.name}': {type(e).__name__}: {e}") from None
        if bio.tell() != len(payload):
            raise DecodeError(f"not valid Avro for schema '{self.name}': {len(payload) - bio.tell()} trailing bytes")
        if not isinstance(rec, dict):
            raise DecodeError(f"schema '{self.name}' is not a record schema")
        return rec


@cache
def codec_for(name: str) -> Codec:
    """Shared codec per schema name (one per process)."""
    return Codec(name)
