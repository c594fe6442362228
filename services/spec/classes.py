"""Operator classes and the recovery each HA scheme yields for them (ICDE 2005, section 3.2, Table 2).

They live with the spec because validation refuses a recovery a node's class cannot get; the
outcomes per scheme are the schemes' descriptors (``services.spec.schemes``).

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

from services.spec.model import Merge, OperatorDef, Spec
from services.spec.schemes import KINDS, OpClass, Outcome, Recovery, Scheme


@dataclass(frozen=True)
class Classified:
    cls: OpClass
    why: str  # the operator or input that decides the class


_R, _C, _A = OpClass.REPEATABLE, OpClass.CONVERGENT_CAPABLE, OpClass.ARBITRARY

# Table 2 and section 6, from the schemes' descriptors: each scheme's rollback outcome by class, and the
# most general class it recovers precisely.
ROLLBACK = {s: k.rollback for s, k in KINDS.items() if k.rollback is not None}
PRECISE = {s: k.precise_up_to for s, k in KINDS.items() if k.precise_up_to is not None}


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
    merges_by_arrival = nd.ha.scheme.kind.settings == "ha" and nd.ha.merge is Merge.ARRIVAL  # DPC merges in SUnion
    if len(inputs) > 1 and merges_by_arrival:
        return Classified(_A, f"it reads {len(inputs)} inputs in arrival order (union-like)")
    top = max((operator_class(spec.operators[o]) for o in nd.operators), key=lambda c: c.cls)
    if len(inputs) > 1:
        return Classified(top.cls, f"{top.why}, and its {len(inputs)} inputs merge in tuple-time order")
    return top


def outcome(scheme: Scheme, recovery: Recovery, cls: OpClass) -> Outcome | str:
    """What ``scheme`` with ``recovery`` yields for a node of class ``cls``, or why it cannot (one line)."""
    kind = KINDS[scheme]
    if kind.recovery is None:
        return f"{scheme.value} gives eventual consistency with tentative results, not a recovery type"
    if recovery not in kind.recoveries:
        return kind.refuses.format(scheme=scheme.value, recovery=recovery.value)
    if recovery is Recovery.GAP:
        return Outcome.GAP
    if recovery is Recovery.ROLLBACK:
        assert kind.rollback is not None, f"{scheme.value} gives rollback recovery but has no Table 2 row"
        return kind.rollback[cls]
    assert kind.precise_up_to is not None, f"{scheme.value} gives precise recovery but names no class for it"
    if cls <= kind.precise_up_to:
        return Outcome.PRECISE
    a = "an" if cls.label[0] in "aeiou" else "a"
    return f"{scheme.value} cannot give precise recovery for {a} {cls.label} node: use {kind.precise_else}"


def table(cls: OpClass) -> dict[Scheme, Outcome]:
    """Table 2's row for ``cls``: the rollback outcome of each standby or backup scheme."""
    return {s: ROLLBACK[s][cls] for s in ROLLBACK}


def describe(spec: Spec, node: str) -> str:
    """One line for ``hastream validate``: the node's class, why, and what each scheme gives it."""
    nd, c = spec.nodes[node], node_class(spec, node)
    rollback = ", ".join(f"{s.value} {o.value}" for s, o in table(c.cls).items())
    precise = ", ".join(s.value for s, most in PRECISE.items() if c.cls <= most)
    mine = nd.ha.scheme.value
    if nd.ha.scheme.kind.recovery is not None:
        got = outcome(nd.ha.scheme, nd.ha.guarantee, c.cls)
        mine += f", {nd.ha.guarantee.value} recovery: {got.value if isinstance(got, Outcome) else 'not possible'}"
    return f"{node}: {c.cls.label}, as {c.why}. Scheme {mine}. Rollback: {rollback}; precise: {precise}; amnesia: gap."
