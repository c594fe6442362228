"""Operator classes and the recovery each HA scheme yields for them (ICDE 2005, section 3.2, Table 2).

The classes nest: arbitrary > deterministic > convergent-capable > repeatable, and a node
takes the class of its most general operator.

- *Deterministic*: the same initial state and the same sequence on each input give the
  same output. Time, the interleaving of several inputs and randomness break it.
- *Convergent-capable*: deterministic, and restarted empty on the same inputs from any
  earlier point its state converges. Window alignment is the only obstacle: hastream's
  windows start at multiples of their slide in tuple time, so they always realign.
- *Repeatable*: convergent-capable, and such a restart gives identical duplicates, which
  needs at most one tuple per input for each output (filter, map, join; not an aggregate).

Consuming several inputs in arrival order is union-like: which tuple comes first depends on
the timing, so such a node is arbitrary, whatever its operators. A node that merges its
inputs in tuple-time order (``merge: time``, SUnion's serialization) is as deterministic as
its operators.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from services.spec.model import Merge, OperatorDef, Recovery, Scheme, Spec


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


@dataclass(frozen=True)
class Classified:
    cls: OpClass
    why: str  # the operator or input that decides the class


_R, _C, _D, _A = OpClass.REPEATABLE, OpClass.CONVERGENT_CAPABLE, OpClass.DETERMINISTIC, OpClass.ARBITRARY

# Table 2: the rollback outcome of each approach, by class (repeatable .. arbitrary).
ROLLBACK: dict[Scheme, tuple[Outcome, Outcome, Outcome, Outcome]] = {
    Scheme.PASSIVE_STANDBY: (Outcome.REPEATING, Outcome.REPEATING, Outcome.REPEATING, Outcome.DIVERGENT),
    Scheme.UPSTREAM_BACKUP: (Outcome.REPEATING, Outcome.CONVERGENT, Outcome.DIVERGENT, Outcome.DIVERGENT),
    Scheme.ACTIVE_STANDBY: (Outcome.REPEATING, Outcome.REPEATING, Outcome.REPEATING, Outcome.DIVERGENT),
}

# Section 6: the most general class for which each approach gives precise recovery. Passive
# standby drops regenerated tuples up to its output log's tail, and for an arbitrary node
# forwards only checkpointed output; active standby switches downstream after the last tuple
# the log holds; upstream backup drops regenerated tuples by their watermarks, which identify
# a tuple only while the state converges.
PRECISE: dict[Scheme, OpClass] = {
    Scheme.PASSIVE_STANDBY: _A,
    Scheme.ACTIVE_STANDBY: _D,
    Scheme.UPSTREAM_BACKUP: _C,
}
_PRECISE_ELSE = {
    Scheme.ACTIVE_STANDBY: "passive_standby (it forwards only checkpointed output)",
    Scheme.UPSTREAM_BACKUP: "passive_standby, or active_standby for a deterministic node",
}


def operator_class(op: OperatorDef) -> Classified:
    if op.type in ("filter", "map"):
        return Classified(_R, f"{op.type} '{op.name}' uses one tuple per output")
    if op.type == "join":
        return Classified(_R, f"join '{op.name}' uses one tuple per input for each output")
    if op.type == "window":
        return Classified(_C, f"window '{op.name}' aggregates many tuples; its windows align on its slide")
    if op.type == "union":
        return Classified(_R, f"union '{op.name}' forwards each tuple")
    raise ValueError(f"no class for operator type '{op.type}'")


def node_class(spec: Spec, node: str) -> Classified:
    """The class of ``node``: its most general operator's, or arbitrary if it merges several inputs by arrival."""
    nd = spec.nodes[node]
    inputs = spec.node_inputs(node)
    if len(inputs) > 1 and nd.ha.scheme is not Scheme.DPC and nd.ha.merge is Merge.ARRIVAL:  # DPC merges in SUnion
        return Classified(_A, f"it reads {len(inputs)} inputs in arrival order (union-like)")
    top = max((operator_class(spec.operators[o]) for o in nd.operators), key=lambda c: c.cls)
    if len(inputs) > 1:
        return Classified(top.cls, f"{top.why}, and its {len(inputs)} inputs merge in tuple-time order")
    return top


def outcome(scheme: Scheme, recovery: Recovery, cls: OpClass) -> Outcome | str:
    """What ``scheme`` with ``recovery`` yields for a node of class ``cls``, or why it cannot (one line)."""
    if scheme is Scheme.DPC:
        return "dpc gives eventual consistency with tentative results, not a recovery type"
    if scheme is Scheme.AMNESIA:
        if recovery is Recovery.GAP:
            return Outcome.GAP
        return (
            f"amnesia restarts empty and loses tuples, so it gives gap recovery, not {recovery.value}: "
            "use passive_standby, active_standby or upstream_backup"
        )
    if recovery is Recovery.GAP:
        return (
            f"{scheme.value} keeps every tuple a recovery needs, so it gives rollback or precise: for gap use amnesia"
        )
    if recovery is Recovery.ROLLBACK:
        return ROLLBACK[scheme][cls]
    if cls <= PRECISE[scheme]:
        return Outcome.PRECISE
    a = "an" if cls.label[0] in "aeiou" else "a"
    return f"{scheme.value} cannot give precise recovery for {a} {cls.label} node: use {_PRECISE_ELSE[scheme]}"


def table(cls: OpClass) -> dict[Scheme, Outcome]:
    """Table 2's row for ``cls``: the rollback outcome of each standby or backup scheme."""
    return {s: ROLLBACK[s][cls] for s in ROLLBACK}


def describe(spec: Spec, node: str) -> str:
    """One line for ``hastream validate``: the node's class, why, and what each scheme gives it."""
    nd, c = spec.nodes[node], node_class(spec, node)
    rollback = ", ".join(f"{s.value} {o.value}" for s, o in table(c.cls).items())
    precise = ", ".join(s.value for s, most in PRECISE.items() if c.cls <= most)
    mine = nd.ha.scheme.value
    if nd.ha.scheme is not Scheme.DPC:
        got = outcome(nd.ha.scheme, nd.ha.guarantee, c.cls)
        mine += f", {nd.ha.guarantee.value} recovery: {got.value if isinstance(got, Outcome) else 'not possible'}"
    return f"{node}: {c.cls.label}, as {c.why}. Scheme {mine}. Rollback: {rollback}; precise: {precise}; amnesia: gap."
