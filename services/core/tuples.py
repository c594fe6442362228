"""The tuple model and the one header codec: the only code that reads or writes ``ht*`` headers.

Headers are the contract with outside clients (kcat, any Kafka client), so values are plain
ASCII. hastream writes one header per tuple, ``ht``: ``TYPE,id,stime,replica,epoch,schema``,
plus a seventh field on a STABLE tuple that a BOUNDARY follows (its stime) and on a TENTATIVE
tuple (its t_max). One header, not one per field: Kafka clients copy each header on produce
and on consume, and six of them cost a node about a sixth of its CPU per tuple. Readers also take the
older form, one header per field (``ht.type``, ``ht.id``, ...), which a hand-written producer
may find easier. The data path reads with ``admit``/``read_headers`` and writes with a
``header_writer``: one split and two ``int`` per tuple read, one ``%`` per tuple written.
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
    CEC_OPEN = "CEC_OPEN"  # CEC: a state part opened; its state in the value (id -1), readers skip it
    CEC_CHECK = "CEC_CHECK"  # CEC: an open part's state now (id -1), readers skip it
    CEC_CLOSE = "CEC_CLOSE"  # CEC: a part closed with a result that went to the dead letters (id -1, no value)


# The types by their short names, for code that tests them per tuple (``t is STABLE``).
STABLE, TENTATIVE, BOUNDARY, UNDO, REC_DONE, EPOCH = (
    TupleType.STABLE,
    TupleType.TENTATIVE,
    TupleType.BOUNDARY,
    TupleType.UNDO,
    TupleType.REC_DONE,
    TupleType.EPOCH,
)

H_TUPLE = "ht"  # the packed header: TYPE,id,stime,replica,epoch,schema[,bound on STABLE | t_max on TENTATIVE]
# The older form, one header per field, still read (a hand-written producer's, or an older hastream's).
H_TYPE = "ht.type"
H_ID = "ht.id"
H_STIME = "ht.stime"
H_REPLICA = "ht.replica"
H_EPOCH = "ht.epoch"
H_SCHEMA = "ht.schema"  # the value's Avro schema: <name>:<CRC-64-AVRO fingerprint> (services.core.codec)
H_BOUND = "ht.bound"  # on a STABLE tuple: a BOUNDARY at this stime follows it (a boundary coalesced with data)
NO_TIME = -(2**62)  # earlier than every tuple time: "none yet"
# On each record of a CEC node's output: part,n,pos,seq,xs (``services.cec.footprints.Mark``; part: "p.j").
H_CEC = "ht.cec"
H_TMAX = "ht.tmax"  # on a TENTATIVE tuple: the tuple time of the last input tuple processed before it (t_max)
# Dead-letter headers: why a message was rejected and where it came from.
H_ERROR = "ht.error"
H_SRC_TOPIC = "ht.src.topic"
H_SRC_PARTITION = "ht.src.partition"
H_SRC_OFFSET = "ht.src.offset"
H_REJECTED_BY = "ht.rejected.by"  # the node replica (and operator) that rejected it

# CEC's footprints in a node's output: no tuple id, and no reader takes them as data or control.
FOOTPRINTS = frozenset({TupleType.CEC_OPEN, TupleType.CEC_CHECK, TupleType.CEC_CLOSE})
TYPE_BYTES: dict[TupleType, bytes] = {t: t.value.encode() for t in TupleType}
_TYPE_BY_BYTES: dict[bytes, TupleType] = {v: k for k, v in TYPE_BYTES.items()}


# Headers as confluent-kafka takes and hands them over: a list of pairs (or a dict), values possibly None.
Headers = list[tuple[str, str | bytes | None]]
RawHeaders = Headers | dict[str, str | bytes | None] | None


# Headers of one tuple of one writer, from its type, id and time.
HeaderWriter = Callable[[TupleType, int, int], Headers]


def header_writer(replica: int = 0, epoch: int = 0, schema: bytes | None = None) -> HeaderWriter:
    """The headers of the tuples one writer (a node replica, a source, a Spark stage) sends to one stream.

    The writer's replica, epoch and schema (``codec.schema_header``) are formatted once, into one
    pattern per type; per tuple only its id and time are. A closure, not a method: it costs no
    more per tuple than building the list in place.
    """
    tail = b"%d,%d,%s" % (replica, epoch, (schema or b"").replace(b"%", b"%%"))
    patterns = {t: TYPE_BYTES[t] + b",%d,%d," + tail for t in TupleType}

    def headers(ttype: TupleType, tid: int, stime: int, _k: str = H_TUPLE) -> Headers:
        return [(_k, patterns[ttype] % (tid, stime))]

    return headers


def _extended(headers: Headers, field: int) -> Headers:
    """A writer's headers with a seventh field on ``ht``."""
    (k, v), *rest = headers
    assert k == H_TUPLE and isinstance(v, bytes), "headers from header_writer start with ht"
    return [(k, v + b",%d" % field), *rest]


def with_bound(headers: Headers, bound: int) -> Headers:
    """A STABLE tuple's headers carrying the BOUNDARY that follows it: one record instead of two."""
    return _extended(headers, bound)


def with_tmax(headers: Headers, tmax: int) -> Headers:
    """A TENTATIVE tuple's headers with its t_max: a reader that changes replica skips what it has."""
    return _extended(headers, tmax)


def _packed(headers: RawHeaders) -> bytes | None:
    """The value of the ``ht`` header, None if there is none (the older form, or no headers)."""
    if isinstance(headers, dict):
        v = headers.get(H_TUPLE)
    else:
        v = next((v for k, v in headers or () if k == H_TUPLE), None)
    return v.encode() if isinstance(v, str) else v


def tmax_of(headers: RawHeaders) -> int | None:
    """A tentative tuple's t_max, None if absent or malformed."""
    try:
        return parse_headers(headers).tmax
    except HeaderError:
        return None


def carries_bound(headers: RawHeaders) -> bool:
    """Whether a boundary rides on the message, for scans that need no more of it."""
    try:
        return parse_headers(headers).bound is not None
    except HeaderError:
        return False


def cec_header(part: tuple[int, int], n: int, pos: int, seq: int, xs: int) -> tuple[str, bytes]:
    """The ``ht.cec`` header of one record of a CEC node's output (ASCII, so kcat shows it)."""
    return (H_CEC, b"%d.%d,%d,%d,%d,%d" % (part[0], part[1], n, pos, seq, xs))


def read_cec(headers: RawHeaders) -> tuple[tuple[int, int], int, int, int, int] | None:
    """(part, n, pos, seq, xs) of a record's ``ht.cec`` header; None without one. Raises HeaderError
    on a malformed one."""
    v = headers.get(H_CEC) if isinstance(headers, dict) else next((v for k, v in headers or () if k == H_CEC), None)
    if v is None:
        return None
    try:
        part, n, pos, seq, xs = (v.encode() if isinstance(v, str) else v).split(b",")
        p, j = part.split(b".")
        return (int(p), int(j)), int(n), int(pos), int(seq), int(xs)
    except ValueError as e:
        raise HeaderError(f"{H_CEC} must be part,n,pos,seq,xs with part p.j, got {v!r}") from e


def make_headers(ttype: TupleType, tid: int, stime: int, replica: int = 0, epoch: int = 0) -> Headers:
    """Headers of one outgoing tuple."""
    return header_writer(replica, epoch)(ttype, tid, stime)


# What a reader takes from one message: type, id, stime, and the boundary that rides on it (None if none).
Head = tuple[TupleType, int, int, int | None]


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
    gate: EpochGate | None,
    _types: dict[bytes, TupleType] = _TYPE_BY_BYTES,
    _k: str = H_TUPLE,
    _stable: TupleType = STABLE,
) -> Head | None:
    """(type, id, stime, bound) of one incoming tuple, for a reader that follows its writer's epochs
    through ``gate`` (None: one that does not): None for a fenced writer's message. Raises
    HeaderError saying what is wrong. ``bound``: a BOUNDARY at that stime follows the tuple.

    On the hot path: the names it compares with are bound once."""
    hs: Any = headers  # a list of pairs whose first is ht, as hastream's writers write; else the slow path
    try:
        k, v = hs[0]
        if k == _k:
            f = v.split(b",")
            t = _types[f[0]]
            n = len(f)
            if n == 6 or n == 7:
                if gate is not None:
                    e = f[4]
                    if e != gate.raw and not gate.admits(e):
                        return None
                return t, int(f[1]), int(f[2]), int(f[6]) if n == 7 and t is _stable else None
    except (LookupError, TypeError, ValueError, AttributeError):
        pass
    meta = parse_headers(headers)  # any other form, or the precise reason it is wrong
    if gate is not None and not gate.admits(b"%d" % meta.epoch):
        return None
    return meta.type, meta.id, meta.stime, meta.bound


def read_headers(headers: RawHeaders) -> Head:
    """``admit`` for a reader that does not follow epochs (benchmarks, tests)."""
    got = admit(headers, None)
    assert got is not None, "only a gate turns a message away"
    return got


def peek(headers: RawHeaders) -> tuple[TupleType | None, int | None, int]:
    """Type, id and epoch of a message, for scans that skip what they cannot use: None for a type
    or id its headers do not name, epoch 0 if absent or malformed."""
    v = _packed(headers)
    if v is not None:
        f = v.split(b",")
        tv, iv, ev = f[0], f[1] if len(f) > 1 else b"", f[4] if len(f) > 4 else b""
    else:
        hd: dict[str, Any] = dict(headers or ())
        tv, iv, ev = hd.get(H_TYPE) or b"", hd.get(H_ID) or b"", hd.get(H_EPOCH) or b""
    t = _TYPE_BY_BYTES.get(tv.encode() if isinstance(tv, str) else tv)
    tid: int | None
    try:
        tid = int(iv)
    except ValueError:
        tid = None
    try:
        return t, tid, int(ev or 0)
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
    """The parsed ``ht`` header (or headers) of one message."""

    type: TupleType
    id: int
    stime: int
    replica: int = 0
    epoch: int = 0
    bound: int | None = None  # a BOUNDARY at this stime follows the tuple (on STABLE tuples)
    schema: str = ""  # <name>:<fingerprint> of the value's Avro schema ("" if absent)
    tmax: int | None = None  # on a TENTATIVE tuple: the tuple time of the last input processed before it


PACKED_FIELDS = "TYPE,id,stime,replica,epoch,schema"


def parse_headers(headers: RawHeaders) -> TupleMeta:
    """Parse the ``ht`` header, or the older ``ht.*`` headers; raises HeaderError naming what is wrong."""
    if not headers:
        raise HeaderError("missing ht header")
    v = _packed(headers)
    return _parse_legacy(headers) if v is None else _parse_packed(v)


def _parse_packed(v: bytes) -> TupleMeta:
    f = v.split(b",")
    if len(f) not in (6, 7):
        raise HeaderError(f"ht header {v[:200]!r} has {len(f)} fields, not {PACKED_FIELDS}[,bound or t_max]")
    ttype = _TYPE_BY_BYTES.get(f[0])
    if ttype is None:
        raise HeaderError(f"unknown tuple type {f[0]!r} in {H_TUPLE}")
    try:
        tid, stime, replica, epoch = int(f[1]), int(f[2]), int(f[3]), int(f[4])
        extra = int(f[6]) if len(f) == 7 else None
    except ValueError as e:
        raise HeaderError(f"malformed header value in {H_TUPLE}: {e}") from None
    bound = extra if ttype is STABLE else None
    tmax = extra if ttype is TENTATIVE else None
    return TupleMeta(ttype, tid, stime, replica, epoch, bound, f[5].decode(errors="replace"), tmax)


def _parse_legacy(headers: RawHeaders) -> TupleMeta:
    ttype: TupleType | None = None
    tid = stime = None
    replica = epoch = 0
    bound = tmax = None
    schema = ""
    pairs: list[tuple[str, Any]] = list(headers.items()) if isinstance(headers, dict) else list(headers or ())
    try:
        for k, v in pairs:
            if k == H_TYPE:
                ttype = _TYPE_BY_BYTES.get(v.encode() if isinstance(v, str) else v)
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
            elif k == H_TMAX:
                tmax = int(v)
            elif k == H_SCHEMA:
                schema = v.decode() if isinstance(v, bytes) else str(v)
    except (TypeError, ValueError) as e:
        if isinstance(e, HeaderError):
            raise
        raise HeaderError(f"malformed header value: {e}") from None
    if ttype is None:
        raise HeaderError(f"missing {H_TUPLE} header (or {H_TYPE})")
    if tid is None:
        raise HeaderError(f"missing {H_ID} header")
    if stime is None:
        raise HeaderError(f"missing {H_STIME} header")
    return TupleMeta(ttype, tid, stime, replica, epoch, bound, schema, tmax)


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
