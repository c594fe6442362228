"""The tuple model and the one header codec: the only code that reads or writes ``ht.*`` headers.

Headers are the contract with outside clients (kcat, any Kafka client), so values are
plain ASCII: the type name and decimal integers. The data path reads them with
``read_headers`` and writes them with a ``header_writer``; both are a few dict and bytes
operations per tuple, with the constant parts built once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable

from services.core.errors import HeaderError


class TupleType(str, Enum):
    """Borealis DPC tuple types."""

    STABLE = "STABLE"
    TENTATIVE = "TENTATIVE"
    BOUNDARY = "BOUNDARY"
    UNDO = "UNDO"
    REC_DONE = "REC_DONE"
    EPOCH = "EPOCH"  # a writer's first message: its epoch fences every older copy of it (id -1, stime 0)


# The types by their short names, for code that tests them per tuple (``t is STABLE``).
STABLE, TENTATIVE, BOUNDARY, UNDO, REC_DONE, EPOCH = (
    TupleType.STABLE,
    TupleType.TENTATIVE,
    TupleType.BOUNDARY,
    TupleType.UNDO,
    TupleType.REC_DONE,
    TupleType.EPOCH,
)

H_TYPE = "ht.type"
H_ID = "ht.id"
H_STIME = "ht.stime"
H_REPLICA = "ht.replica"
H_EPOCH = "ht.epoch"
H_SCHEMA = "ht.schema"  # the value's Avro schema: <name>:<CRC-64-AVRO fingerprint> (services.core.codec)
H_BOUND = "ht.bound"  # on a STABLE tuple: a BOUNDARY at this stime follows it (a boundary coalesced with data)
NO_TIME = -(2**62)  # earlier than every tuple time: "none yet"
H_TMAX = "ht.tmax"  # on a TENTATIVE tuple: the tuple time of the last input tuple processed before it (t_max)
# Dead-letter headers: why a message was rejected and where it came from.
H_ERROR = "ht.error"
H_SRC_TOPIC = "ht.src.topic"
H_SRC_PARTITION = "ht.src.partition"
H_SRC_OFFSET = "ht.src.offset"
H_REJECTED_BY = "ht.rejected.by"  # the node replica (and operator) that rejected it

TYPE_BYTES: dict[TupleType, bytes] = {t: t.value.encode() for t in TupleType}
_TYPE_BY_BYTES: dict[bytes, TupleType] = {v: k for k, v in TYPE_BYTES.items()}


# Headers as confluent-kafka takes and hands them over: a list of pairs (or a dict), values possibly None.
Headers = list[tuple[str, str | bytes | None]]
RawHeaders = Headers | dict[str, str | bytes | None] | None


# Headers of one tuple of one writer, from its type, id and time.
HeaderWriter = Callable[[TupleType, int, int], Headers]


def header_writer(replica: int = 0, epoch: int = 0, schema: bytes | None = None) -> HeaderWriter:
    """The headers of the tuples one writer (a node replica, a source, a Spark stage) sends to one stream.

    The writer's replica, epoch and schema (``ht.schema``, ``codec.schema_header``) are
    encoded once; per tuple only its type, id and time. A closure, not a method: it costs
    no more per tuple than building the list in place.
    """
    type_bytes, rep, ep = TYPE_BYTES, (H_REPLICA, b"%d" % replica), (H_EPOCH, b"%d" % epoch)
    if schema is None:

        def headers(ttype: TupleType, tid: int, stime: int) -> Headers:
            return [(H_TYPE, type_bytes[ttype]), (H_ID, b"%d" % tid), (H_STIME, b"%d" % stime), rep, ep]

        return headers
    sc = (H_SCHEMA, schema)

    def with_schema(ttype: TupleType, tid: int, stime: int) -> Headers:
        return [(H_TYPE, type_bytes[ttype]), (H_ID, b"%d" % tid), (H_STIME, b"%d" % stime), rep, ep, sc]

    return with_schema


def with_bound(headers: Headers, bound: int) -> Headers:
    """A STABLE tuple's headers carrying the BOUNDARY that follows it: one record instead of two."""
    return headers + [(H_BOUND, b"%d" % bound)]


def with_tmax(headers: Headers, tmax: int) -> Headers:
    """A TENTATIVE tuple's headers with its t_max: a reader that changes replica skips what it has."""
    return headers + [(H_TMAX, b"%d" % tmax)]


def tmax_of(headers: RawHeaders) -> int | None:
    """A tentative tuple's t_max (``ht.tmax``), None if absent or malformed."""
    for k, v in headers.items() if isinstance(headers, dict) else headers or ():
        if k == H_TMAX:
            try:
                return int(v)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return None
    return None


def carries_bound(headers: RawHeaders) -> bool:
    """Whether a boundary rides on the message (``ht.bound``), for scans that need no more of it."""
    if isinstance(headers, dict):
        return H_BOUND in headers
    return any(kv[0] == H_BOUND for kv in headers or ())


def make_headers(ttype: TupleType, tid: int, stime: int, replica: int = 0, epoch: int = 0) -> Headers:
    """Headers of one outgoing tuple."""
    return header_writer(replica, epoch)(ttype, tid, stime)


# What a reader takes from one message: type, id, stime, and the boundary that rides on it (None if none).
Head = tuple[TupleType, int, int, int | None]


def read_headers(headers: RawHeaders, _types: dict[bytes, TupleType] = _TYPE_BY_BYTES) -> Head:
    """(type, id, stime, bound) of one incoming tuple, on the hot path; raises HeaderError saying what is wrong.

    ``bound`` is the ``ht.bound`` header: a BOUNDARY at that stime follows the tuple."""
    try:
        hd: dict[str, Any] = dict(headers)  # type: ignore[arg-type]  # None raises TypeError: handled below
        b = hd.get(H_BOUND)
        return _types[hd[H_TYPE]], int(hd[H_ID]), int(hd[H_STIME]), None if b is None else int(b)
    except (KeyError, TypeError, ValueError):
        parse_headers(headers)  # raises with the precise reason
        raise HeaderError("malformed ht.* headers") from None


class EpochGate:
    """What a reader of one topic partition knows of its writer's epochs: the highest one seen.

    Each incarnation of a node replica writes with a higher epoch than every earlier one and
    announces it (an EPOCH tuple) before anything else, so a message with a lower epoch that
    comes after a higher one was written by a copy that has been replaced (paused, then
    resumed) and is dropped. ``fenced`` counts those. Per tuple the header is compared as
    bytes with the last epoch seen; it is parsed only when it changes.
    """

    __slots__ = ("epoch", "raw", "fenced")

    def __init__(self, epoch: int = 0) -> None:
        self.epoch = epoch
        self.raw: str | bytes | int | None = b"%d" % epoch
        self.fenced = 0

    def admits(self, raw: str | bytes | int | None) -> bool:
        """Whether a message with epoch header ``raw`` (None: absent, epoch 0) comes from a live writer;
        raises ValueError if it is not a number."""
        if raw == self.raw:
            return True
        e = int(raw) if raw else 0
        if e < self.epoch:
            self.fenced += 1
            return False
        self.epoch, self.raw = e, raw
        return True


def admit(
    headers: RawHeaders,
    gate: EpochGate,
    _types: dict[bytes, TupleType] = _TYPE_BY_BYTES,
    _e: str = H_EPOCH,
    _t: str = H_TYPE,
    _i: str = H_ID,
    _s: str = H_STIME,
    _b: str = H_BOUND,
) -> Head | None:
    """``read_headers`` for a reader that follows a writer's epochs: None for a fenced writer's message.

    On the hot path: the header names are bound once, as the types are."""
    try:
        hd: dict[str, Any] = dict(headers)  # type: ignore[arg-type]  # None raises TypeError: handled below
        raw = hd.get(_e)
        if raw != gate.raw and not gate.admits(raw):
            return None
        b = hd.get(_b)
        return _types[hd[_t]], int(hd[_i]), int(hd[_s]), None if b is None else int(b)
    except (KeyError, TypeError, ValueError):
        parse_headers(headers)  # raises with the precise reason
        raise HeaderError("malformed ht.* headers") from None


def peek(headers: RawHeaders) -> tuple[TupleType | None, int | None, int]:
    """Type, id and epoch of a message, for scans that skip what they cannot use: None for a type
    or id its headers do not name, epoch 0 if absent or malformed."""
    hd: dict[str, Any] = dict(headers or ())
    t = _TYPE_BY_BYTES.get(hd.get(H_TYPE) or b"")
    tid: int | None
    try:
        tid = int(hd.get(H_ID) or b"")
    except ValueError:
        tid = None
    try:
        return t, tid, int(hd.get(H_EPOCH) or 0)
    except ValueError:
        return t, tid, 0


def peek_type_and_id(headers: RawHeaders) -> tuple[TupleType | None, int | None]:
    """Type and id of a message if its headers name them, else None for each."""
    t, tid, _ = peek(headers)
    return t, tid


def deadletter_headers(
    headers: RawHeaders, reason: str, topic: str, partition: int | None, offset: int | None, by: str = ""
) -> RawHeaders:
    """A rejected message's headers plus why it was rejected, where it came from and who rejected it."""
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    return pairs + [
        (H_ERROR, reason.encode()[:4000]),
        (H_SRC_TOPIC, topic.encode()),
        (H_SRC_PARTITION, b"%d" % (partition if partition is not None else -1)),
        (H_SRC_OFFSET, b"%d" % (offset if offset is not None else -1)),
        (H_REJECTED_BY, by.encode()),
    ]


@dataclass(slots=True)
class TupleMeta:
    """The parsed ht.* headers of one message."""

    type: TupleType
    id: int
    stime: int
    replica: int = 0
    epoch: int = 0
    bound: int | None = None  # a BOUNDARY at this stime follows the tuple (``ht.bound``, on STABLE tuples)
    schema: str = ""  # ``ht.schema``: <name>:<fingerprint> of the value's Avro schema ("" if absent)


def parse_headers(headers: RawHeaders) -> TupleMeta:
    """Parse ht.* headers; raises HeaderError naming what is wrong."""
    if not headers:
        raise HeaderError("missing ht.* headers")
    ttype: TupleType | None = None
    tid = stime = None
    replica = epoch = 0
    bound: int | None = None
    schema = ""
    pairs: list[tuple[str, Any]] = list(headers.items()) if isinstance(headers, dict) else list(headers)
    try:
        for k, v in pairs:
            if k == H_TYPE:
                ttype = _TYPE_BY_BYTES.get(v)
                if ttype is None:
                    raise HeaderError(f"unknown tuple type {v!r} in {H_TYPE}")
            elif k == H_ID:
                tid = int(v)
            elif k == H_STIME:
                stime = int(v)
            elif k == H_REPLICA:
                replica = int(v)
            elif k == H_EPOCH:
                epoch = int(v)
            elif k == H_BOUND:
                bound = int(v)
            elif k == H_SCHEMA:
                schema = v.decode() if isinstance(v, bytes) else str(v)
    except (TypeError, ValueError) as e:
        if isinstance(e, HeaderError):
            raise
        raise HeaderError(f"malformed header value: {e}") from None
    if ttype is None:
        raise HeaderError(f"missing {H_TYPE} header")
    if tid is None:
        raise HeaderError(f"missing {H_ID} header")
    if stime is None:
        raise HeaderError(f"missing {H_STIME} header")
    return TupleMeta(ttype, tid, stime, replica, epoch, bound, schema)


def headers_dict(headers: RawHeaders) -> dict[str, str]:
    """Headers as text, for display."""
    pairs = headers.items() if isinstance(headers, dict) else headers or ()
    return {k: (v.decode(errors="replace") if isinstance(v, bytes) else v or "") for k, v in pairs}


@dataclass(slots=True)
class Tuple:
    """A decoded tuple: its metadata and Avro record, as clients see it."""

    stream: str
    partition: int
    offset: int
    meta: TupleMeta
    key: bytes | None
    value: dict[str, Any] | None
