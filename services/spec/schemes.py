"""The recovery schemes a node may choose (``ha:`` in the spec), one descriptor each, in one table.

A descriptor says everything the rest of hastream needs to know of a scheme: where its class
is (the node builds it, ``services.schemes``), whether its outputs are one log the primary
writes or a log per replica, where its settings, heartbeats and detection come from, which
coordinator protocol drives it (DPC's reconciliation grants, or the HA takeovers), whether it
has its inputs trimmed by its acknowledgements, the broker settings each kind of its nodes' topics
needs (``NodeTopic``: restart images, the input and output logs a recovery reads back, the level-1
acknowledgements it publishes), which engines may run it, the recovery types it gives by
operator class as hastream runs them (ICDE 2005, Table 2 and section 6), and the state stores
it can keep its recovery points in (``services.spec.stores``, its default first). A new scheme
is its module and one entry in ``KINDS``; nothing else tests which scheme a node has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any

from services.log import retention


class Scheme(str, Enum):
    """How a node survives failures; chosen per node with ``ha:`` (docs/spec.md)."""

    DPC = "dpc"  # Borealis Delay-Process-Correct
    AMNESIA = "amnesia"  # the HA algorithms (ICDE 2005): the standby restarts empty at the inputs' end
    PASSIVE_STANDBY = "passive_standby"  # the primary sends its state to a standby every interval
    ACTIVE_STANDBY = "active_standby"  # the secondary processes the same inputs and holds its output
    UPSTREAM_BACKUP = "upstream_backup"  # upstream logs keep what the node needs; it rebuilds from them

    @property
    def kind(self) -> SchemeKind:
        return KINDS[self]

    @property
    def one_log(self) -> bool:
        """Whether each output stream is one log the current primary writes (``<spec>.<stream>``),
        rather than a log per replica: only the primary writes, the epoch fences the others."""
        return KINDS[self].one_log

    @property
    def acks(self) -> bool:
        """Whether its primary publishes level-1 acknowledgements (``services.ha.acks``): upstream backup
        trims by them, active standby's secondaries join from them."""
        return KINDS[self].acks


class Recovery(str, Enum):
    """The guarantee an HA scheme gives after a failure (ICDE 2005, section 3.1)."""

    PRECISE = "precise"
    ROLLBACK = "rollback"
    GAP = "gap"


class OpClass(IntEnum):
    """Ordered from the most to the least constrained: a node takes the maximum over its operators."""

    REPEATABLE = 0
    CONVERGENT_CAPABLE = 1
    DETERMINISTIC = 2
    ARBITRARY = 3

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


class Outcome(Enum):
    """What a failure leaves in the output (section 3.1): the recovery type and, for rollback, its kind."""

    PRECISE = "precise"  # O_f + O' equals a failure-free run's output
    REPEATING = "repeating"  # rollback; the duplicates are identical to earlier tuples
    CONVERGENT = "convergent"  # rollback; duplicates differ, removing them gives a failure-free output
    DIVERGENT = "divergent"  # rollback; no failure-free run gives the output without its duplicates
    GAP = "gap"  # tuples may be lost


class NodeTopic(Enum):
    """A node's topics by what they hold; a descriptor gives each kind the broker settings it needs.
    A topic of two kinds (two nodes' views of one log) takes the settings of the later one here."""

    RESTART = "restart"  # its restart images: one topic per replica, or per node for a one-log scheme
    INPUTS = "inputs"  # the logs of the streams it reads
    OUTPUTS = "outputs"  # the logs of the streams it writes
    ACKS = "acks"  # the spec's level-1 acknowledgements, which its primary publishes


@dataclass(frozen=True)
class SchemeKind:
    """One scheme's descriptor (see the module's docstring)."""

    factory: str  # "module:Class" of its RecoveryScheme
    one_log: bool  # its outputs: one log the primary writes (else a log per replica)
    settings: str  # "dpc": the spec's dpc: section (heartbeat_interval, failure_timeout); "ha": its ha: keys
    takeovers: bool  # the coordinator elects a primary per partition (else it grants DPC's reconciliations)
    recovery: Recovery | None  # its default recovery type; None: eventual consistency, no recovery type
    recoveries: tuple[Recovery, ...] = ()  # the recovery types it can give
    refuses: str = ""  # why it cannot give another one ({scheme}, {recovery}), with what can
    # rollback outcome by class: Table 2's, or hastream's where it is better (said at the scheme)
    rollback: tuple[Outcome, Outcome, Outcome, Outcome] | None = None
    precise_up_to: OpClass | None = None  # section 6: the most general class it recovers precisely here
    # how what its replicas still need of its inputs is heard, so the coordinator may trim a log every
    # reader of which says so: "acks" (level-1 acknowledgements), "heartbeats" (their ``needs``); "": never
    input_needs: str = ""
    # a takeover reads its output log back from a restart point its replicas report (heartbeats'
    # ``keeps``): a log it writes is trimmed no further (``services.coordinator.trims``)
    reads_own_log: bool = False
    # its topics' broker settings by kind; a kind it does not name keeps the deployment's defaults
    topics: Mapping[NodeTopic, Mapping[str, str]] = field(default_factory=dict, hash=False)
    engines: tuple[str, ...] = ("python",)
    stores: tuple[str, ...] = ()  # the state stores it can use (``services.spec.stores``), its default first

    @property
    def trims_inputs(self) -> bool:
        """Whether its input logs may be trimmed at what it still needs (when every reader says so)."""
        return bool(self.input_needs)

    @property
    def acks(self) -> bool:
        """Whether its primary publishes level-1 acknowledgements: it has the acks topic."""
        return NodeTopic.ACKS in self.topics

    @property
    def store(self) -> str | None:
        """The state store its nodes keep unless they say (``state:``); None: it keeps no state, a
        recovery starts from the logs alone."""
        return self.stores[0] if self.stores else None


_C, _D = OpClass.CONVERGENT_CAPABLE, OpClass.DETERMINISTIC
_REP, _DIV = Outcome.REPEATING, Outcome.DIVERGENT
# The schemes that keep every tuple a recovery needs.
_KEEPS_ALL: dict[str, Any] = {
    "recoveries": (Recovery.ROLLBACK, Recovery.PRECISE),
    "refuses": "{scheme} keeps every tuple a recovery needs, so it gives rollback or precise: for gap use amnesia",
    "reads_own_log": True,
}
_IMAGES = {NodeTopic.RESTART: retention.IMAGES}
# A recovery reads the node's input and output logs back: no retention may cut them (amnesia reads
# none back: it restarts at the inputs' end).
_READS_BACK = {**_IMAGES, NodeTopic.INPUTS: retention.RECOVERY_LOG, NodeTopic.OUTPUTS: retention.RECOVERY_LOG}
_ACKED = {**_READS_BACK, NodeTopic.ACKS: retention.ACKS}


def _ha(factory: str, recovery: Recovery, **rest: Any) -> SchemeKind:
    """An HA scheme's descriptor (ICDE 2005): one log the primary writes, its ``ha:`` settings, and the
    coordinator's takeovers."""
    return SchemeKind(factory, one_log=True, settings="ha", takeovers=True, recovery=recovery, **rest)


# Section 6 on precise recovery, as hastream does it: passive standby drops regenerated tuples up to its
# output log's tail, each checked against the one the log holds, which needs a deterministic node (the
# paper's passive standby also recovers an arbitrary node, by forwarding only checkpointed output; hastream's
# writes every batch, and has no arbitrary node: ``services.spec.classes``); active standby switches
# downstream after the last tuple the log holds; upstream backup drops regenerated tuples by their
# watermarks, which identify a tuple only while the state converges.
KINDS: dict[Scheme, SchemeKind] = {
    Scheme.DPC: SchemeKind(
        "services.dpc.scheme:DpcScheme",
        one_log=False,
        settings="dpc",
        takeovers=False,
        recovery=None,
        topics=_IMAGES,
        engines=("python", "spark"),
        stores=("restart_images", "cec", "changelog"),
    ),
    Scheme.AMNESIA: _ha(
        "services.ha.amnesia:AmnesiaScheme",
        Recovery.GAP,
        recoveries=(Recovery.GAP,),
        refuses="amnesia restarts empty and loses tuples, so it gives gap recovery, not {recovery}: "
        "use passive_standby, active_standby or upstream_backup",
        topics=_IMAGES,
    ),
    Scheme.PASSIVE_STANDBY: _ha(
        "services.ha.passive_standby:PassiveStandbyScheme",
        Recovery.ROLLBACK,
        **_KEEPS_ALL,
        rollback=(_REP, _REP, _REP, _DIV),
        precise_up_to=_D,
        topics=_READS_BACK,
        stores=("checkpoints",),
        input_needs="heartbeats",
    ),
    Scheme.UPSTREAM_BACKUP: _ha(
        "services.ha.upstream_backup:UpstreamBackupScheme",
        Recovery.ROLLBACK,
        **_KEEPS_ALL,
        # Table 2 has convergent for a convergent-capable node; hastream's cut is at a bucket start and the
        # rebuild reads every open window from its first tuple, so the windows realign and the duplicates
        # are identical (tests/unit/ha/test_upstream_backup.py, rollback)
        rollback=(_REP, _REP, _DIV, _DIV),
        precise_up_to=_C,
        input_needs="acks",
        topics=_ACKED,
    ),
    Scheme.ACTIVE_STANDBY: _ha(
        "services.ha.active_standby:ActiveStandbyScheme",
        Recovery.ROLLBACK,
        **_KEEPS_ALL,
        rollback=(_REP, _REP, _REP, _DIV),
        precise_up_to=_D,
        topics=_ACKED,
        input_needs="heartbeats",
    ),
}
