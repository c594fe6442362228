"""A CEC node partition's output log on Kafka: the checkpoint store the paper keeps in the output queue.

The records of one operator partition (results and footprints, ``services.cec.checkpointer``)
go to one partition of its output topic, in the order they were made, each batch in one
transaction (``services.core.transactions``): a crash leaves whole batches, so the N on the last
committed record counts the parts its footprints describe (the paper's atomic records). Results
are STABLE tuples with their dense ids, as every node writes them; footprints are CEC_OPEN and
CEC_CHECK records (no id; every hastream reader skips them) whose value is a
``checkpoint_part`` record holding the part's pickled state. Each record carries ``ht.cec``
(``services.core.tuples.cec_header``): the scan reads the headers and decodes only the
footprints it keeps.

The topic must keep everything from the extent's start: ``cleanup.policy=delete`` with no
retention (``TOPIC_CONFIG``: a recovery log's, ``services.log.retention``), trimmed only below T (the digest's §4).
"""

from __future__ import annotations

from typing import Any, Callable

from confluent_kafka import Message

from services.cec import scan
from services.cec.checkpointer import Out
from services.cec.footprints import Kind, Mark
from services.core.codec import codec_for, schema_header
from services.core.errors import HeaderError
from services.core.transactions import TransactionalProducer
from services.core.tuples import STABLE, TupleType, admit, cec_header, header_writer, read_cec
from services.log import retention
from services.log.tail import backward, first_offset

TOPIC_CONFIG = retention.RECOVERY_LOG
FOOTPRINT = "checkpoint_part"
TYPES = {Kind.OPEN: TupleType.CEC_OPEN, Kind.CHECK: TupleType.CEC_CHECK}  # a footprint's record type
_KINDS: dict[TupleType | None, Kind] = {
    STABLE: Kind.RESULT,
    TupleType.CEC_CLOSE: Kind.RESULT,  # a result that went to the dead letters: its part is closed all the same
    TupleType.CEC_OPEN: Kind.OPEN,
    TupleType.CEC_CHECK: Kind.CHECK,
}


def footprint(operator: str, partition: int, epoch: int, mark: Mark, state: bytes) -> dict[str, Any]:
    """A footprint's ``checkpoint_part`` value: the part's pickled state, with what it is of."""
    part = f"{mark.win[0]}.{mark.win[1]}"
    return {
        "operator": operator,
        "partition": partition,
        "part": part,
        "stable_id": mark.pos,
        "epoch": epoch,
        "state": state,
    }


class OutLog:
    """Writes one operator partition's records to ``topic[partition]``: ``write`` inside an open
    transaction of ``producer``, which the caller commits once per batch."""

    def __init__(
        self,
        producer: TransactionalProducer,
        topic: str,
        partition: int,
        schema: str,
        operator: str,
        next_id: int = 0,
        replica: int = 0,
        epoch: int = 0,
    ) -> None:
        self.producer, self.topic, self.partition = producer, topic, partition
        self.operator, self.epoch, self.next_id = operator, epoch, next_id
        self.results = header_writer(replica, epoch, schema_header(schema))
        self.footprints = header_writer(replica, epoch, schema_header(FOOTPRINT))
        self.encode: Callable[[Any], bytes] = codec_for(schema).encode
        self.encode_footprint: Callable[[Any], bytes] = codec_for(FOOTPRINT).encode

    def write(self, outs: list[Out]) -> None:
        """Queue ``outs`` in the open transaction, in order; a result takes the next stable id."""
        send, topic, partition = self.producer.send, self.topic, self.partition
        for mark, payload in outs:
            cec = cec_header(mark.win, mark.n, mark.pos, mark.seq, mark.xs)
            if mark.kind is Kind.RESULT:
                rec, stime = payload
                headers = [*self.results(STABLE, self.next_id, stime), cec]
                self.next_id += 1
                send(topic, self.encode(rec), None, partition, headers)
                continue
            value = self.encode_footprint(footprint(self.operator, partition, self.epoch, mark, payload))
            send(topic, value, None, partition, [*self.footprints(TYPES[mark.kind], -1, mark.stime), cec])


def record(m: Message) -> scan.Record | None:
    """A CEC record's mark, and a footprint's undecoded value (a result's record is not needed to
    rebuild the state); None for any other message (a boundary, an epoch)."""
    headers = m.headers()
    try:
        got = read_cec(headers)
        head = admit(headers, None) if got is not None else None
    except HeaderError:
        return None
    if got is None or head is None or head[0] not in _KINDS:
        return None
    (win, n, pos, seq, xs), kind = got, _KINDS[head[0]]
    return Mark(kind, win, n, pos, head[2], seq, xs), (None if kind is Kind.RESULT else m.value())


def eventual(bootstrap: str, topic: str, partition: int, chunk: int = 2000) -> scan.Eventual:
    """The eventual checkpoint at the tail of ``topic[partition]``: read back in chunks from the tail
    (each four times the one before, ``services.log.tail.backward``), only the footprints kept
    decoded. A log whose start was trimmed (its low watermark above 0) must still hold the extent."""
    trimmed = first_offset(bootstrap, topic, partition) > 0
    chunks = backward(bootstrap, topic, partition, chunk, record)
    ec = scan.backward(([r for _, r in ch if r is not None] for ch in chunks), trimmed=trimmed)
    decode = codec_for(FOOTPRINT).decode
    ec.parts = {w: (mark, decode(value)["state"]) for w, (mark, value) in ec.parts.items()}
    return ec
