"""A node replica's outputs: the messages its scheme queued, encoded and written to its own topics.

Each replica writes ``<spec>.<stream>.r<k>``, partition = the node's partition (across an exchange,
a topic per node partition with a partition per connection: ``services.spec.exchanges``). A scheme encodes
its results with ``encode`` (a record that does not fit the stream's schema is rejected
there, before it gets an id), then appends ``Out`` records (type, id, stime, payload or
None) to ``queue(stream)``; ``flush`` adds the ``ht`` header and waits until Kafka has
them all, so whatever a restart image records as written is written. ``write`` sends them
without waiting, having first waited for what the last ``write`` sent: a loop that writes
each batch so overlaps Kafka's acknowledgement of one batch with the processing of the next,
and has at most one batch unacknowledged. A queue that ends with a stable tuple and a BOUNDARY (a bucket's
results, then the frontier past it: the usual end of a batch) is written as one record, the
boundary riding on the tuple (a field of its ``ht`` header), so a stream with data carries
no boundary records of its own. ``begin`` sets the incarnation's epoch
(``services.node.fence``); ``guard`` runs before each flush and write.

Opened with a ``TransactionalProducer`` (``services.core.transactions``), the outputs are written in
atomic batches: what is sent between two flushes, results and control tuples alike, is one
transaction, readable all at once by a ``read_committed`` reader (every hastream reader) or not at
all. A flush commits it; ``write`` adds the batch to the open transaction until it is ``COMMIT_S`` old,
then commits it before it sends the batch into the next (a commit waits for the broker: as Kafka Streams'
commit interval under exactly-once, one per batch would hold the loop a round trip each time).

A ``stamp``ed stream (CEC's output log, ``services.cec.store``) queues its results and footprints with a
header of their own: their payload is (value, key, header), a footprint's value of its own schema.
"""

from __future__ import annotations

import json
import time
from typing import Callable

from confluent_kafka import Message

from services.core.codec import ENCODE_ERRORS, codec_for, schema_header
from services.core.kafka import DataProducer
from services.core.partitioner import key_encoder
from services.core.transactions import TransactionalProducer
from services.core.tuples import (
    BOUNDARY,
    EPOCH,
    FOOTPRINTS,
    STABLE,
    TENTATIVE,
    HeaderWriter,
    deadletter_headers,
    header_writer,
    make_headers,
    with_bound,
    with_tmax,
)
from services.dpc.soutput import Out
from services.operators.base import Item, Reject, reason
from services.spec.plan import OutputPlan

Payload = tuple[bytes, bytes | None]  # an encoded record: (value, key)
COMMIT_S = 0.1  # how long ``write`` keeps adding batches to one transaction (Kafka Streams' EOS default)


class Outputs:
    def __init__(self, plans: tuple[OutputPlan, ...], partition: int, replica: int, epoch: int = 0) -> None:
        self.partition = partition
        self.queues: dict[str, list[Out]] = {o.stream: [] for o in plans}
        self._writers = {
            o.stream: (o.topic(replica, partition), codec_for(o.schema).encode, o.key, key_encoder(o.key_type))
            for o in plans
        }
        self._parts = {o.stream: o.kafka_partition(partition) for o in plans}  # a connection's own partition
        self._schemas = {o.stream: schema_header(o.schema) for o in plans}
        self.replica = replica
        self.stamped: dict[str, bytes] = {}  # stream -> its footprints' schema header (``stamp``)
        # records for other topics that go with the queued batch (a changelog): (topic, partition, key, value)
        self.side: list[tuple[str, int, bytes, bytes | None]] = []
        self._set_epoch(epoch)
        self.producer: DataProducer | None = None
        self.produced = 0
        self.unacked = 0  # messages the last ``write`` sent without waiting for them
        self.guard: Callable[[], None] | None = None  # raises if this writer may no longer write

    def begin(self, epoch: int) -> None:
        """Write with ``epoch`` from now on, announced first on every output partition (an EPOCH
        tuple): readers drop what older copies of this replica write after it."""
        self._set_epoch(epoch)
        for q in self.queues.values():
            q.insert(0, (EPOCH, -1, 0, None))
        self.flush()

    def _set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._headers = {s: header_writer(self.replica, epoch, sc) for s, sc in self._schemas.items()}
        self._footprints = {s: header_writer(self.replica, epoch, sc) for s, sc in self.stamped.items()}

    def stamp(self, stream: str, schema: str) -> None:
        """``stream``'s payloads carry their own header from now on, its footprints' values are of ``schema``."""
        self.stamped[stream] = schema_header(schema)
        self._set_epoch(self.epoch)

    def open(self, producer: DataProducer) -> None:
        self.producer = producer

    def queue(self, stream: str) -> list[Out]:
        return self.queues[stream]

    def topic(self, stream: str) -> str:
        return self._writers[stream][0]

    def kafka_partition(self, stream: str) -> int:
        """The partition of ``topic(stream)`` this node partition writes (a connection's, across an exchange)."""
        return self._parts[stream]

    def encode(self, stream: str, items: list[Item], reject: Reject) -> list[tuple[Payload, int]]:
        """``items`` as (payload, stime); a record that does not fit the schema goes to ``reject(stream, ...)`` instead."""
        _, encode, key_field, key_of = self._writers[stream]
        try:
            if key_field:
                return [((encode(rec), key_of(rec[key_field])), stime) for rec, stime in items]
            return [((encode(rec), None), stime) for rec, stime in items]
        except ENCODE_ERRORS:
            out = []
            for it in items:  # again one by one, to reject just the records that fail
                rec = it[0]
                try:
                    out.append(((encode(rec), key_of(rec[key_field]) if key_field else None), it[1]))
                except ENCODE_ERRORS as e:
                    reject(stream, it, f"does not fit stream '{stream}': {reason(e)}")
            return out

    def flush(self) -> int:
        """Write every queued message and wait for Kafka's acknowledgement of everything written; returns how many."""
        assert self.producer is not None
        sent = self._send()
        if sent or self.unacked or self._open():  # an open transaction may hold a dead letter alone
            self.producer.flush()
            self.unacked = 0
        return sent

    def write(self) -> int:
        """Wait for Kafka's acknowledgement of what the last ``write`` sent (it came while the
        caller processed), then write every queued message without waiting; returns how many."""
        assert self.producer is not None
        if self.unacked and not self._young():
            self.producer.flush()
            self.unacked = 0
        sent = self._send()
        self.unacked += sent
        return sent

    def end_turn(self, more_waiting: bool) -> int:
        """Write what a loop turn queued. When more input is waiting (the poll was full) and the
        scheme allows, processing it hides this turn's acknowledgement (``write``); a turn that
        caught up with its input waits for it (``flush``), or Kafka's linger would hold the
        results back until the next turn."""
        return self.write() if more_waiting else self.flush()

    def _send(self) -> int:
        """Produce every queued message, ``guard`` first; returns how many."""
        assert self.producer is not None
        if self.guard is not None:
            self.guard()
        if self.side or any(self.queues.values()):
            self._begun()
        send = self.producer.send
        produce = self.producer.raw.produce  # failures reach the producer's delivery callback
        sent = 0
        for s, q in self.queues.items():
            if not q:
                continue
            headers_of, part = self._headers[s], self._parts[s]
            topic = self._writers[s][0]
            if s in self.stamped:
                sent += self._send_stamped(q, topic, part, headers_of, self._footprints[s])
                continue
            carrier = _carrier(q)
            for ttype, tid, stime, payload in q:
                if ttype is TENTATIVE:
                    payload, tmax = payload
                    headers = with_tmax(headers_of(ttype, tid, stime), tmax)
                else:
                    headers = headers_of(ttype, tid, stime)
                value, key = payload if payload is not None else (None, None)
                try:
                    produce(topic, value, key, part, headers=headers)
                except BufferError:  # queue full: the wrapper waits for room
                    send(topic, value, key, part, headers)
            sent += len(q)
            q.clear()
            if carrier is not None:
                (ttype, tid, stime, (value, key)), bound = carrier
                send(topic, value, key, part, with_bound(headers_of(ttype, tid, stime), bound))
                sent += 1
        for topic, part, key, value in self.side:
            self.producer.send(topic, value, key, part)
        self.side.clear()
        self.produced += sent
        return sent

    def _send_stamped(self, q: list[Out], topic: str, part: int, headers_of: HeaderWriter, fp: HeaderWriter) -> int:
        """Produce a stamped stream's queue (see the module's docstring); returns how many."""
        assert self.producer is not None
        send, produce = self.producer.send, self.producer.raw.produce
        for ttype, tid, stime, payload in q:
            if ttype is TENTATIVE:  # a failure's results: not checkpointed, as any stream's
                (value, key), tmax = payload
                headers = with_tmax(headers_of(ttype, tid, stime), tmax)
            elif payload is None:  # a control tuple
                value = key = None
                headers = headers_of(ttype, tid, stime)
            else:
                value, key, stamp = payload
                headers = (fp if ttype in FOOTPRINTS else headers_of)(ttype, tid, stime)
                headers.append(stamp)
            try:
                produce(topic, value, key, part, headers=headers)
            except BufferError:  # queue full: the wrapper waits for room
                send(topic, value, key, part, headers)
        n = len(q)
        q.clear()
        return n

    def _young(self) -> bool:
        """An open transaction that may take another batch before it commits."""
        p = self.producer
        return isinstance(p, TransactionalProducer) and p.open and time.monotonic() - p.begun_at < COMMIT_S

    def _open(self) -> bool:
        return isinstance(self.producer, TransactionalProducer) and self.producer.open

    def _begun(self) -> None:
        """Atomic batches: the batch's transaction is open before anything is sent into it."""
        if isinstance(self.producer, TransactionalProducer):
            self.producer.ensure_begun()

    def deadletter(self, topic: str, msg: Message, reason: str, by: str) -> None:
        """Copy a rejected input message (key, value, headers) to the dead-letter topic, with why and whence."""
        assert self.producer is not None
        self._begun()
        headers = deadletter_headers(msg.headers(), reason, msg.topic() or "", msg.partition(), msg.offset(), by)
        self.producer.send(topic, msg.value(), msg.key(), headers=headers)

    def deadletter_tuple(self, topic: str, stream: str, item: Item, reason: str, by: str) -> None:
        """A tuple an operator rejected (it has no Avro form, maybe): its record as JSON, with why and where."""
        assert self.producer is not None
        self._begun()
        rec, stime = item
        value = json.dumps(rec, default=repr, sort_keys=True).encode()
        headers = deadletter_headers(make_headers(STABLE, -1, stime), reason, stream, self.partition, None, by)
        self.producer.send(topic, value, None, headers=headers)


def _carrier(q: list[Out]) -> tuple[Out, int] | None:
    """Take a trailing stable tuple and BOUNDARY off ``q``: the tuple, to be written carrying the boundary's stime."""
    if len(q) > 1 and q[-1][0] is BOUNDARY and q[-2][0] is STABLE:
        bound = q.pop()[2]
        return q.pop(), bound
    return None
