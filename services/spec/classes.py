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

The class is the one hastream executes. Every node, of any scheme, merges several inputs in
tuple-time order (SUnion's serialization, ``services.node.path``), the same sequence on every
replica whatever the arrival interleaving, so its inputs add nothing to its operators' class;
``merge: arrival`` is refused. Every operator is repeatable or convergent-capable but the count
window, which is deterministic: restarted elsewhere in its input, it counts each key's windows
from there, and they never realign. No node is arbitrary here. An arbitrary node would need what hastream lacks: the
paper's passive standby forwarding only checkpointed output for precise recovery, and
determinants for active standby and upstream backup.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.spec.model import OperatorDef, Spec
from services.spec.schemes import KINDS, OpClass, Outcome, Recovery, Scheme


@dataclass(frozen=True)
class Classified:
    cls: OpClass
    why: str  # the operator that decides the class (and how several inputs merge)


_R, _C = OpClass.REPEATABLE, OpClass.CONVERGENT_CAPABLE

# Table 2 and section 6 as hastream runs them, from the schemes' descriptors: each scheme's rollback
# outcome by class, and the most general class it recovers precisely.
ROLLBACK = {s: k.rollback for s, k in KINDS.items() if k.rollback is not None}
PRECISE = {s: k.precise_up_to for s, k in KINDS.items() if k.precise_up_to is not None}


def operator_class(op: OperatorDef) -> Classified:
    if op.type in ("filter", "map"):
        return Classified(_R, f"{op.type} '{op.name}' uses one tuple per output")
    if op.type == "join":
        return Classified(_R, f"join '{op.name}' uses one tuple per input for each output")
    if op.type == "window" and op.count:
        return Classified(
            OpClass.DETERMINISTIC, f"count window '{op.name}' counts each key's tuples from where it started"
        )
    if op.type == "window":
        return Classified(_C, f"window '{op.name}' aggregates many tuples; its windows align on its slide")
    if op.type == "union":
        return Classified(_R, f"union '{op.name}' forwards each tuple")
    raise ValueError(f"no class for operator type '{op.type}'")


def node_class(spec: Spec, node: str) -> Classified:
    """The class of ``node``: its most general operator's, since its inputs merge in tuple-time order."""
    inputs = spec.node_inputs(node)
    top = max((operator_class(spec.operators[o]) for o in spec.nodes[node].operators), key=lambda c: c.cls)
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
    return f"{scheme.value} cannot give precise recovery for {a} {cls.label} node: {_precise_instead(cls)}"


def _precise_for(cls: OpClass) -> list[str]:
    """The schemes that recover a node of ``cls`` precisely, from the descriptors, so no text names a scheme
    for a class it does not recover precisely."""
    return [s.value for s, most in PRECISE.items() if cls <= most]


def _precise_instead(cls: OpClass) -> str:
    can = _precise_for(cls)
    return f"use {' or '.join(can)}" if can else "no scheme recovers it precisely here: use rollback"


def table(cls: OpClass) -> dict[Scheme, Outcome]:
    """What a rollback gives a node of ``cls`` under each standby or backup scheme: Table 2's row, or
    hastream's where it does better (``services.spec.schemes``), so validate claims only what happens."""
    return {s: ROLLBACK[s][cls] for s in ROLLBACK}


def describe(spec: Spec, node: str) -> str:
    """One line for ``hastream validate``: the node's class, why, and what each scheme gives it."""
    nd, c = spec.nodes[node], node_class(spec, node)
    rollback = ", ".join(f"{s.value} {o.value}" for s, o in table(c.cls).items())
    precise = ", ".join(_precise_for(c.cls))
    mine = nd.ha.scheme.value
    if nd.ha.scheme.kind.recovery is not None:
        got = outcome(nd.ha.scheme, nd.ha.guarantee, c.cls)
        mine += f", {nd.ha.guarantee.value} recovery: {got.value if isinstance(got, Outcome) else 'not possible'}"
    return f"{node}: {c.cls.label}, as {c.why}. Scheme {mine}. Rollback: {rollback}; precise: {precise}; amnesia: gap."
