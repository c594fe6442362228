"""Which recovery scheme a node runs, by the ``ha:`` of its spec: the registry of the schemes.

It sits above every scheme and below whoever starts a node (the CLI, bench, tests), which hands
``build_scheme`` to ``services.node.loop.NodeService``: the node never imports a scheme.
"""

from __future__ import annotations

from services.dpc.scheme import DpcScheme
from services.ha.active_standby import ActiveStandbyScheme
from services.ha.amnesia import AmnesiaScheme
from services.ha.passive_standby import PassiveStandbyScheme
from services.ha.upstream_backup import UpstreamBackupScheme
from services.node.scheme import NodeRuntime, RecoveryScheme
from services.spec.model import Scheme


def build_scheme(node: NodeRuntime) -> RecoveryScheme:
    if node.plan.scheme is Scheme.DPC:
        return DpcScheme(node)
    if node.plan.scheme is Scheme.AMNESIA:
        return AmnesiaScheme(node)
    if node.plan.scheme is Scheme.PASSIVE_STANDBY:
        return PassiveStandbyScheme(node)
    if node.plan.scheme is Scheme.UPSTREAM_BACKUP:
        return UpstreamBackupScheme(node)
    if node.plan.scheme is Scheme.ACTIVE_STANDBY:
        return ActiveStandbyScheme(node)
    raise ValueError(f"no recovery scheme '{node.plan.scheme.value}'")
