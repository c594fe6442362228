"""Builds the recovery scheme a node runs, by the ``ha:`` of its spec, from the scheme's descriptor.

The descriptors are data in the spec layer (``services.spec.schemes.KINDS``): each names its
scheme's class as ``module:Class``, imported here, above every scheme and below whoever starts a
node (the CLI, bench, tests), which hands ``build_scheme`` to ``services.node.loop.NodeService``:
the node never imports a scheme.
"""

from __future__ import annotations

from typing import Callable

from services.core.factories import factory
from services.node.scheme import NodeRuntime, RecoveryScheme
from services.spec.schemes import Scheme

Factory = Callable[[NodeRuntime], RecoveryScheme]


def build_scheme(node: NodeRuntime) -> RecoveryScheme:
    return scheme_class(node.plan.scheme)(node)


def scheme_class(scheme: Scheme) -> Factory:
    """The class a descriptor names (imported once, ``services.core.factories``)."""
    cls: Factory = factory(scheme.kind.factory)
    return cls
