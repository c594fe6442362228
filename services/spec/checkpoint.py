"""A node's state store and its settings: ``state: <store>``, or ``checkpoint: {method: <store>, ...}``.

The store is one its scheme can use (``SchemeKind.stores``); ``checkpoint:`` also gives the store's
settings (``StoreKind.params``: CEC's q, u, ci_ms and cp_ms), each a positive integer, the rest at
their defaults. A store that runs one window through its own output log (CEC) needs a node of
exactly that: one window reading the node's only input, not across an exchange, writing its only
output, in Python, reconciled by checkpoint/redo (undo/redo rebuilds the window behind its back).
"""

from __future__ import annotations

from typing import Any

from services.spec import exchanges
from services.spec.model import Spec
from services.spec.policies import Reconciliation
from services.spec.problems import Problems
from services.spec.schemes import Scheme
from services.spec.stores import STORES


def parse(ck: Problems, ndef: dict, path: tuple, scheme: Scheme) -> tuple[str | None, dict[str, int]]:
    """The node's store (None: its scheme's default, or refused) and the settings it gives the store."""
    if "checkpoint" not in ndef:
        return state(ck, ndef.get("state"), path + ("state",), scheme), {}
    at = path + ("checkpoint",)
    if "state" in ndef:
        ck.err(at, "give 'state' or 'checkpoint', not both ('checkpoint: {method: ...}' names the store too)")
        return None, {}
    raw = ck.mapping(ndef["checkpoint"], at, "'checkpoint'")
    if "method" not in raw:
        ck.err(at, f"'checkpoint' needs a 'method': one of {', '.join(STORES)}")
        return None, {}
    name = state(ck, raw["method"], at + ("method",), scheme)
    if name is None:
        return None, {}
    defaults = STORES[name].params
    ck.unknown_keys(raw, {"method", *defaults}, at)
    return name, {k: ck.pos_int(raw, k, at, d) for k, d in defaults.items()}


def state(ck: Problems, raw: Any, at: tuple, scheme: Scheme) -> str | None:
    """A store its scheme can use; None when it is not given (the scheme's default) or refused: a store
    nobody registered, one the scheme cannot use, or any store at all on a scheme that keeps no state."""
    if raw is None:
        return None
    node, stores = at[1], scheme.kind.stores
    if not isinstance(raw, str) or raw not in STORES:
        ck.err(at, f"'{at[-1]}' must be one of {', '.join(STORES)}, got {raw!r}")
    elif not stores:
        ck.err(
            at,
            f"node '{node}' runs {scheme.value}, which keeps no state (a takeover starts from the logs alone): "
            f"remove '{at[-1]}: {raw}'",
        )
    elif raw not in stores:
        uses = " or ".join(f"'{at[-1]}: {s}'" for s in stores)
        ck.err(
            at,
            f"node '{node}' runs {scheme.value}, which keeps its state in {' or '.join(stores)} only, not {raw}: "
            f"use {uses}, or leave '{at[-1]}' out for its default {stores[0]}",
        )
    else:
        return raw
    return None


def one_window(ck: Problems, spec: Spec) -> None:
    """Each node whose store runs one window through its output log (CEC) is just that (the module's docstring)."""
    for n, nd in spec.nodes.items():
        store = nd.store
        if store is None or not STORES[store].one_window:
            continue
        at, why = ("nodes", n), _not_one_window(spec, n)
        if why:
            ck.err(at, f"node '{n}' keeps its state in {store}, which {why}")
        elif spec.reconciliation_of(n) is Reconciliation.UNDO:
            ck.err(at, f"node '{n}' keeps its state in {store}: it reconciles by checkpoint/redo, not undo/redo")


def _not_one_window(spec: Spec, n: str) -> str:
    """Why node ``n`` is not one window from its only input to its only output ('' if it is)."""
    nd = spec.nodes[n]
    ops = [spec.operators[o] for o in nd.operators]
    ins, outs = spec.node_inputs(n), spec.node_outputs(n)
    if len(ops) != 1 or ops[0].type != "window":
        return "checkpoints one window: give the node exactly one window operator"
    if nd.engine != "python":
        return "runs on engine: python (a Spark window's state is its session's)"
    if len(ins) != 1 or any(exchanges.exchange_of(spec, s) is not None for s in ins):
        return "replays one input in its log order: the window must read a stream that needs no exchange"
    if len(outs) != 1:
        return "writes the window's results and parts to one output log"
    return ""
