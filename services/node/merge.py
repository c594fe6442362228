"""The seam between a node's intake and its recovery scheme: admitted tuples, and the merge they go to.

The intake (``services.node.intake``) reads each input message once and admits it by the
reader contract (``services.dpc.contract``); what it admits goes, each input in its own log
order, to the scheme's ``Merge``, which orders the inputs for the operators. SUnion's time
merge (``services.dpc.sunion``) is the one DPC and the HA schemes use; one input in order and
no failure takes the log order itself, past the merge's buckets (``Ordering.direct``); a merge
by origin sequence number (Flux's exchange) is another ``Merge``. The scheme then sees the
batch as ``Admitted`` (how much was taken, and where each input's log stands), and an input
that changed replicas as ``InputMoved``: neither is a Kafka message nor a DPC type. A scheme
that asks for input positions (``RecoveryScheme.wants_positions``) gets each tuple's offset in
its input's log with it, and every tuple through the merge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from services.core.tuples import NO_TIME, TupleType
from services.operators.base import Item


class Merge(Protocol):
    """Takes admitted tuples of several inputs, each in its log order, and orders them for the operators."""

    boundaries: list[int | None]  # per input: no later tuple of it has a smaller stime
    high: int  # one input in order: its newest stable stime (no later tuple takes an earlier bucket)
    in_order: bool  # one input, whose log order is the order to run in
    pending: Any  # tuples not run yet (a truthy value when there are some)

    def push(
        self,
        port: int,
        ttype: TupleType,
        tid: int,
        stime: int,
        rec: Any,
        now: float,
        tmax: int = NO_TIME,
        offset: int = -1,
    ) -> None:
        """A data tuple of input ``port``, after every earlier one of that input (``offset``: its offset
        in the input's log, where the scheme asks for positions, else -1)."""

    def boundary(self, port: int, stime: int, now: float | None = None) -> None:
        """Input ``port`` will send no tuple with a smaller stime."""

    def undo(self, port: int, pending: bool = True, kept: bool = True) -> None:
        """Input ``port``'s tentative tuples are void: its stable stream replaces them."""


class Ordering(Protocol):
    """Where a scheme takes admitted tuples: its merge, and the log order of one input past it."""

    @property
    def merge(self) -> Merge: ...

    direct: list[Item]  # (record, stime) of one input's next stable tuples, in its log order
    direct_first: int  # the input id of direct's first tuple (its ids follow on)
    failed: bool  # in an upstream failure: every tuple goes through the merge


@dataclass(slots=True)
class Admitted:
    """What the intake took of one poll: the scheme's view of a batch (its tuples went to the merge)."""

    messages: int = 0  # messages read, admitted or not
    # Input topic -> the offset after the last message read of it in this poll (only for a scheme
    # that asks, ``RecoveryScheme.wants_positions``): where each input's log stands.
    positions: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InputMoved:
    """An input changed the upstream replica it reads (it failed, fell behind, reconciles or recovered)."""

    stream: str
    replica: int  # the upstream replica it reads now
    keeps_tentative: bool  # its tentative tuples stay until the new replica's tuples replace them
