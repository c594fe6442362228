"""The state stores a node may keep its recovery points in (``state:`` in the spec), one descriptor each.

A store decides how a scheme's recovery points are kept and how the newest comes back
(``services.node.state.StateStore``); the scheme decides when one is due and what it holds. Each
scheme's descriptor (``services.spec.schemes.KINDS``) names the stores it can use, its default
first; a scheme that names none keeps no state (it recovers from the logs alone). A new store
(CEC's partial checkpoints in the output log) is its module and one entry in ``STORES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from services.log import retention
from services.spec.schemes import NodeTopic


@dataclass(frozen=True)
class StoreKind:
    """One store's descriptor: its class is built with the node, its restart topic and its stable path."""

    name: str  # the spec's word for it (``state: <name>``, ``checkpoint: {method: <name>}``)
    factory: str  # "module:Class" of its StateStore
    about: str  # one line: how it keeps a point
    # the settings ``checkpoint:`` may give it, with their defaults (positive integers)
    params: Mapping[str, int] = field(default_factory=dict, hash=False)
    # its topics' broker settings by kind, over its scheme's (``services.spec.topics``)
    topics: Mapping[NodeTopic, Mapping[str, str]] = field(default_factory=dict, hash=False)
    atomic: bool = False  # its node writes its outputs in transactions, a batch at a time
    # what it needs of the node: one window reading the node's only input, writing its only output
    one_window: bool = False


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
        StoreKind(
            "cec",
            "services.cec.store:CecStore",
            "the window's parts, each opened, checked and closed in the node's own output log (CEC)",
            # the paper's policy (``services.cec.intensity``): extent and replay targets, slot length and period
            params={"q": 1000, "u": 1_000_000, "ci_ms": 5, "cp_ms": 100},
            # the output log keeps everything from the extent's start, the inputs everything after T
            topics={NodeTopic.INPUTS: retention.RECOVERY_LOG, NodeTopic.OUTPUTS: retention.RECOVERY_LOG},
            atomic=True,
            one_window=True,
        ),
        StoreKind(
            "changelog",
            "services.node.changelog:ChangelogStore",
            "each part the input changed, whole, in the restart topic after every run; a tombstone when it closes",
            topics={NodeTopic.INPUTS: retention.RECOVERY_LOG},
            atomic=True,
            one_window=True,
        ),
    )
}
