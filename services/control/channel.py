"""Reading the control topic as typed messages (``services.control.messages``)."""

from __future__ import annotations

import logging

from confluent_kafka import OFFSET_END, TopicPartition

from services.control.messages import ControlMessage, decode_control
from services.core.errors import DecodeError
from services.core.kafka import plain_consumer

log = logging.getLogger(__name__)


class ControlReader:
    """Follows the control topic from its end: what is sent from now on."""

    def __init__(self, bootstrap: str, topic: str, role: str) -> None:
        self._c = plain_consumer(bootstrap, role)
        self._c.assign([TopicPartition(topic, 0, OFFSET_END)])

    def poll(self, max_messages: int = 100) -> list[ControlMessage]:
        """The messages that arrived, without waiting; unreadable ones are skipped."""
        out = []
        for m in self._c.consume(max_messages, 0):
            if m.error() is not None:
                continue
            try:
                out.append(decode_control(m.value() or b""))
            except (DecodeError, ValueError) as e:
                log.debug("skipping an unreadable control message: %s", e)
        return out

    def close(self) -> None:
        self._c.close()
