"""Dead-lettering: a message that cannot be processed is kept, with why, and the service goes on."""
from __future__ import annotations

from confluent_kafka import Message

from services.core.kafka import BatchProducer
from services.core.tuples import H_ERROR, H_SRC_OFFSET, H_SRC_PARTITION, H_SRC_TOPIC


def send_to_deadletter(producer: BatchProducer, topic: str, msg: Message, reason: str) -> None:
    """Copy ``msg`` (key, value, headers) to ``topic``, adding the reason and source position."""
    headers = list(msg.headers() or [])
    headers += [
        (H_ERROR, reason.encode()[:4000]),
        (H_SRC_TOPIC, (msg.topic() or "").encode()),
        (H_SRC_PARTITION, b"%d" % msg.partition()),
        (H_SRC_OFFSET, b"%d" % msg.offset()),
    ]
    producer.send(topic, msg.value(), msg.key(), headers=headers)
