"""A node replica's outputs: the messages its scheme queued, encoded and written to its own topics.

Each replica writes ``<stream>.r<k>``, partition = the node's partition. A scheme appends
``Out`` records (type, id, stime, record or None) to ``queue(stream)``; ``flush`` encodes,
adds the ``ht.*`` headers and waits until Kafka has them all, so whatever a restart image
records as written is written.
"""

from __future__ import annotations

from confluent_kafka import Message

from services.core.codec import codec_for
from services.core.kafka import BatchProducer
from services.core.partitioner import key_encoder
from services.core.tuples import deadletter_headers, header_writer
from services.dpc.soutput import Out
from services.spec.plan import OutputPlan


class Outputs:
    def __init__(self, plans: tuple[OutputPlan, ...], partition: int, replica: int, epoch: int = 0) -> None:
        self.partition = partition
        self.queues: dict[str, list[Out]] = {o.stream: [] for o in plans}
        self._writers = {
            o.stream: (o.topics[replica], codec_for(o.schema).encode, o.key, key_encoder(o.key_type)) for o in plans
        }
        self._headers = header_writer(replica, epoch)
        self.producer: BatchProducer | None = None
        self.produced = 0

    def open(self, producer: BatchProducer) -> None:
        self.producer = producer

    def queue(self, stream: str) -> list[Out]:
        return self.queues[stream]

    def topic(self, stream: str) -> str:
        return self._writers[stream][0]

    def flush(self) -> int:
        """Write every queued message and wait for Kafka's acknowledgement; returns how many."""
        assert self.producer is not None
        part, send = self.partition, self.producer.send
        produce, on_delivery = self.producer.raw.produce, self.producer.on_delivery
        headers_of = self._headers
        sent = 0
        for s, q in self.queues.items():
            if not q:
                continue
            topic, encode, key_field, key_of = self._writers[s]
            for ttype, tid, stime, rec in q:
                if rec is not None:
                    key = key_of(rec[key_field]) if key_field else None
                    value = encode(rec)
                else:
                    key = value = None
                headers = headers_of(ttype, tid, stime)
                try:
                    produce(topic, value, key, part, headers=headers, on_delivery=on_delivery)
                except BufferError:  # queue full: the wrapper waits for room
                    send(topic, value, key, part, headers)
            sent += len(q)
            q.clear()
        if sent:
            self.produced += sent
            self.producer.flush()
        return sent

    def deadletter(self, topic: str, msg: Message, reason: str) -> None:
        """Copy a rejected input message (key, value, headers) to the dead-letter topic, with why and whence."""
        assert self.producer is not None
        headers = deadletter_headers(msg.headers(), reason, msg.topic() or "", msg.partition(), msg.offset())
        self.producer.send(topic, msg.value(), msg.key(), headers=headers)
