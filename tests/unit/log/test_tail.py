"""Backward scans of an output log survive a broker connection torn down mid-scan."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from services.core.tuples import STABLE, TENTATIVE, make_headers
from services.log import tail


class Msg:
    def __init__(self, offset: int, headers: Any) -> None:
        self._offset, self._headers = offset, headers

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None

    def headers(self) -> Any:
        return self._headers


LOG = [Msg(0, make_headers(STABLE, 0, 10)), Msg(1, make_headers(STABLE, 1, 20)), Msg(2, make_headers(TENTATIVE, 2, 30))]


class FakeConsumer:
    """One partition holding ``LOG``; ``fail`` makes the first watermark query fail as a dying broker does."""

    def __init__(self, fail: bool) -> None:
        self.fail, self.pos = fail, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        if self.fail:
            raise KafkaException(KafkaError(KafkaError._DESTROY_BROKER, "broker destroyed"))
        return 0, len(LOG)

    def assign(self, tps: list[TopicPartition]) -> None:
        self.pos = tps[0].offset

    def consume(self, n: int, timeout: float) -> list[Msg]:
        out = LOG[self.pos : self.pos + n]
        self.pos += len(out)
        return out

    def poll(self, timeout: float) -> Msg | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def close(self) -> None:
        pass


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch) -> list[FakeConsumer]:
    """Consumers handed out by the scan: the first fails, later ones work."""
    made: list[FakeConsumer] = []

    def plain_consumer(bootstrap: str, role: str, **_: Any) -> FakeConsumer:
        made.append(FakeConsumer(fail=not made))
        return made[-1]

    monkeypatch.setattr(tail, "plain_consumer", plain_consumer)
    return made


def test_offset_after_stable_retries_a_destroyed_broker(flaky: list[FakeConsumer]) -> None:
    assert tail.offset_after_stable("b", "t.r1", 0, last_stable=0) == 1
    assert len(flaky) == 2


def test_last_stable_id_retries_a_destroyed_broker(flaky: list[FakeConsumer]) -> None:
    assert tail.last_stable_id("b", "t.r1", 0) == 1
    assert len(flaky) == 2


def test_last_message_retries_a_destroyed_broker(flaky: list[FakeConsumer]) -> None:
    m = tail.last_message("b", "t.r1", 0, timeout=1)
    assert m is not None and m.offset() == 2
