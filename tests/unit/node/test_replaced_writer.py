"""A writer replaced while it stood still (SIGSTOP past the detection time) wakes up to find its
inputs trimmed to its successor's needs: it says it was replaced and stops, not that input is lost."""

from __future__ import annotations

import pytest

from services.core.config import Settings
from services.core.errors import FencedError, TrimmedError
from services.node import fence
from services.node.loop import NodeService
from services.schemes import build_scheme
from tests.unit.ha.test_ha_scheme import SPEC


class Monitor:
    """The heartbeats of the replicas as a monitor that has not read them yet: the successor's epoch
    (``claimed``) is seen only once the fence reads the heartbeat topic up to its end."""

    def __init__(self, claimed: int) -> None:
        self.claimed, self.seen = claimed, 0

    def epoch(self, node: str, partition: int, replica: int) -> int:
        return self.seen if replica == 0 else 5

    def read_up_to(self, end: int, timeout: float = 5.0) -> bool:
        self.seen = self.claimed
        return True


def _trimmed(max_messages: int, timeout: float) -> list:
    raise TrimmedError("amn.a[0]: the offset to read from is no longer in the log")


def _old_primary(monkeypatch: pytest.MonkeyPatch, claimed: int) -> NodeService:
    """Replica 1 of ``n``, primary at epoch 5, whose last fence check was just now."""
    monkeypatch.setattr(fence, "_end", lambda bootstrap, topic: 100)
    svc = NodeService(SPEC, "n", 0, 1, Settings(bootstrap="unused:9092"), build_scheme)
    monitor = Monitor(claimed)
    svc.fence = fence.Fence("unused:9092", monitor, "hb", "n", 0, 1, epoch=5, stall_s=60.0, replicas=(0, 1))  # type: ignore[arg-type]
    monkeypatch.setattr(svc.inputs, "poll", _trimmed)
    return svc


def test_a_replaced_writer_that_finds_its_inputs_trimmed_says_it_was_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    svc = _old_primary(monkeypatch, claimed=9)  # replica 0 took over at epoch 9 meanwhile
    with pytest.raises(FencedError, match=r"replaced by a newer incarnation or replica \(epoch 9 > 5"):
        svc._poll()


def test_a_writer_still_in_charge_that_finds_its_inputs_trimmed_says_input_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc = _old_primary(monkeypatch, claimed=0)  # nobody took over: the trim lost input
    with pytest.raises(TrimmedError, match="no longer in the log"):
        svc._poll()
