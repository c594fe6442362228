"""A deployment's topics and their settings: what ``up`` creates, and which of them are its own.

The settings come from the scheme descriptors of the spec's nodes (``services.spec.topics``):
each says what its restart images, the logs a recovery reads back and its acknowledgements need.
"""

from __future__ import annotations

from services.coordinator.names import internal_topics
from services.core.admin import TopicSpec, broker_count, ensure_topics
from services.spec import Spec
from services.spec.egress import egress_topics
from services.spec.topics import all_topics, topic_configs


def provision(spec: Spec, bootstrap: str) -> list[str]:
    """Create the deployment's topics (replication 3 where the cluster has 3 brokers)."""
    rf = 3 if broker_count(bootstrap) >= 3 else 1
    cfg = {"min.insync.replicas": "2"} if rf == 3 else {}
    return ensure_topics(bootstrap, topic_specs(spec, rf, cfg))


def topic_specs(spec: Spec, replication: int = 1, config: dict[str, str] | None = None) -> list[TopicSpec]:
    """Every topic of a deployment with its settings: ``config`` for all, then what the schemes of its
    nodes ask for theirs (restart topics take messages as large as an image, and the logs HA schemes
    recover from keep every record until trimmed)."""
    own = topic_configs(spec)
    topics = [(t, p, own.get(t, {})) for t, p in all_topics(spec)]
    topics += [(t, p, c) for _, t, p, c in egress_topics(spec)]
    return [TopicSpec(t, p, replication, {**(config or {}), **c}) for t, p, c in topics]


def owned_topics(spec: Spec) -> list[str]:
    """The topics that belong to the deployment alone: all of its own, its egresses', the coordinator's,
    and none that a source shares by name (``topic:``)."""
    shared = {sd.topic for sd in spec.streams.values() if sd.topic}
    egresses = [t for _, t, _, _ in egress_topics(spec)]
    return [t for t, _ in all_topics(spec) if t not in shared] + egresses + internal_topics(spec)
