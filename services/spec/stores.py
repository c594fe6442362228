"""The state stores a node may keep its recovery points in (``state:`` in the spec), one descriptor each.

A store decides how a scheme's recovery points are kept and how the newest comes back
(``services.node.state.StateStore``); the scheme decides when one is due and what it holds. Each
scheme's descriptor (``services.spec.schemes.KINDS``) names the stores it can use, its default
first; a scheme that names none keeps no state (it recovers from the logs alone). A new store
(CEC's partial checkpoints in the output log) is its module and one entry in ``STORES``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StoreKind:
    """One store's descriptor: its class is built with the node and its restart topic."""

    name: str  # the spec's word for it (``state: <name>``)
    factory: str  # "module:Class" of its StateStore
    about: str  # one line: how it keeps a point


STORES: dict[str, StoreKind] = {
    kind.name: kind
    for kind in (
        StoreKind(
            "restart_images",
            "services.node.state:RestartImages",
            "each point a whole restart image in the replica's restart topic",
        ),
        StoreKind(
            "checkpoints",
            "services.ha.checkpoints:Checkpoints",
            "a chain of deltas between whole images in the node's checkpoint topic",
        ),
    )
}
