"""Expressions compile safely; the codec round-trips and rejects garbage; headers parse strictly."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.core.codec import _PROBE_SCHEMA, _WRAPPED, ENCODE_ERRORS, Codec, codec_for
from services.core.errors import DecodeError, ExprError, HeaderError
from services.core.paths import SCHEMA_DIR
from services.core.tuples import RawHeaders, TupleType, make_headers, parse_headers
from services.spec.expr import compile_expr


def test_expression_semantics() -> None:
    f = compile_expr("value > 20 and sensor != 'x'", ["value", "sensor"])
    assert f({"value": 21, "sensor": "a"}) and not f({"value": 21, "sensor": "x"})
    g = compile_expr("max(left.ts, right.ts) - min(left.ts, right.ts)", left=["ts"], right=["ts"])
    assert g({"ts": 3}, {"ts": 10}) == 7


@pytest.mark.parametrize(
    "src",
    [
        "__import__('os')",
        "open('f')",
        "value.__class__",
        "lambda: 1",
        "[x for x in value]",
        "valu + 1",
        "(",
        "globals()",
    ],
)
def test_unsafe_or_unknown_expressions_are_rejected(src: str) -> None:
    with pytest.raises(ExprError):
        compile_expr(src, ["value"])


@given(st.text(max_size=30), st.integers(-(2**62), 2**62), st.floats(allow_nan=False), st.integers(0, 2**62))
def test_codec_roundtrip(sensor: str, ts: int, value: float, seq: int) -> None:
    c = codec_for("reading")
    rec = {"sensor": sensor, "ts": ts, "value": value, "seq": seq}
    assert c.decode(c.encode(rec)) == rec


def _values(schema: Any, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of an Avro schema as fastavro parsed it (every type the project's schemas and the probe use)."""
    if isinstance(schema, str):
        return named[schema] if schema in named else PRIMITIVES[schema]
    if isinstance(schema, list):
        return st.one_of([_values(s, named) for s in schema])
    t = schema["type"]
    if t == "record":
        fields = {f["name"]: _values(f["type"], named) for f in schema["fields"]}
        named[schema["name"]] = strategy = st.fixed_dictionaries(fields)
        return strategy
    if t == "enum":
        named[schema["name"]] = strategy = st.sampled_from(schema["symbols"])
        return strategy
    if t == "array":
        return st.lists(_values(schema["items"], named), max_size=3)
    if t == "map":
        return st.dictionaries(st.text(max_size=5), _values(schema["values"], named), max_size=3)
    return _values(t, named)


PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "double": st.floats(allow_nan=False),
    "string": st.text(max_size=10),
    "bytes": st.binary(max_size=10),
}


@pytest.mark.parametrize("name", sorted(p.stem for p in SCHEMA_DIR.glob("*.avsc")) + ["probe"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_codec_gives_what_fastavros_public_functions_give(name: str, data: st.DataObject) -> None:
    """A codec calls what fastavro's schemaless_writer and _reader wrap: the same bytes and records
    for every schema, and the same refusal of a record that does not fit."""
    assert _WRAPPED is not None, "this fastavro no longer has the functions the codec calls: it runs slower"
    schema = _PROBE_SCHEMA if name == "probe" else None  # the probe: a named type used by name, an enum, a union
    fast, public = Codec(name, _WRAPPED, schema), Codec(name, None, schema)
    rec = data.draw(_values(fast.schema, {}))
    assert fast.encode(rec) == public.encode(rec)
    assert fast.decode(fast.encode(rec)) == public.decode(public.encode(rec)) == rec
    bad = dict.fromkeys(rec, object())  # no field takes it but a boolean
    with pytest.raises(ENCODE_ERRORS):
        fast.encode(bad)
    with pytest.raises(ENCODE_ERRORS):
        public.encode(bad)


@pytest.mark.parametrize("payload", [b"", b"\xff\xff\xff\xff", b"\x02a", None])
@pytest.mark.parametrize("wrapped", [_WRAPPED, None], ids=["wrapped", "public"])
def test_codec_rejects_garbage(payload: bytes | None, wrapped: Any) -> None:
    with pytest.raises(DecodeError):
        Codec("reading", wrapped).decode(payload)


def test_codec_rejects_trailing_bytes() -> None:
    c = codec_for("reading")
    with pytest.raises(DecodeError, match="trailing"):
        c.decode(c.encode({"sensor": "s", "ts": 1, "value": 1.0, "seq": 1}) + b"\x00")


def test_headers_roundtrip_and_errors() -> None:
    m = parse_headers(make_headers(TupleType.TENTATIVE, 42, 1000, replica=1, epoch=3))
    assert (m.type, m.id, m.stime, m.replica, m.epoch) == (TupleType.TENTATIVE, 42, 1000, 1, 3)
    cases: list[tuple[RawHeaders, str]] = [
        (None, "missing ht"),
        ([("ht.type", b"STABLE"), ("ht.stime", b"1")], "ht.id"),
        ([("ht.type", b"WHAT"), ("ht.id", b"1"), ("ht.stime", b"1")], "unknown tuple type"),
        ([("ht.type", b"STABLE"), ("ht.id", b"x"), ("ht.stime", b"1")], "malformed"),
    ]
    for bad, why in cases:
        with pytest.raises(HeaderError, match=why):
            parse_headers(bad)


def test_codec_is_safe_to_share_between_threads() -> None:
    """Node services in one process share codecs: concurrent encodes must not mix payloads."""
    import threading

    c = codec_for("reading")
    corrupted = []

    def work(tag: str) -> None:
        for i in range(50_000):
            rec = {"sensor": tag, "ts": i, "value": float(i), "seq": i}
            try:
                ok = c.decode(c.encode(rec)) == rec
            except DecodeError:
                ok = False
            if not ok:
                corrupted.append(rec)

    threads = [threading.Thread(target=work, args=(t,)) for t in ("a", "bbbbbbbb", "cc")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert corrupted == []
