"""A deployment's topics and their settings: what ``up`` creates, and which of them are its own.

The settings come from the modules whose records the topics hold: restart images
(``services.log.images``), the logs HA schemes recover from (``services.ha.logs``) and the
acknowledgements (``services.ha.acks``).
"""

from __future__ import annotations

from services.coordinator.names import internal_topics
from services.core.admin import TopicSpec, broker_count, ensure_topics
from services.ha.acks import TOPIC_CONFIG as ACKS_TOPIC_CONFIG
from services.ha.logs import TOPIC_CONFIG as HA_LOG_CONFIG
from services.ha.logs import recovery_logs
from services.log.images import TOPIC_CONFIG as RESTART_TOPIC_CONFIG
from services.spec import Spec


def provision(spec: Spec, bootstrap: str) -> list[str]:
    """Create the deployment's topics (replication 3 where the cluster has 3 brokers)."""
    rf = 3 if broker_count(bootstrap) >= 3 else 1
    cfg = {"min.insync.replicas": "2"} if rf == 3 else {}
    return ensure_topics(bootstrap, topic_specs(spec, rf, cfg))


def topic_specs(spec: Spec, replication: int = 1, config: dict[str, str] | None = None) -> list[TopicSpec]:
    """Every topic of a deployment with its settings: restart topics take messages as large as an
    image, and the logs HA schemes recover from keep every record until trimmed."""
    own = {t: RESTART_TOPIC_CONFIG for t, _ in spec.restart_topics()}
    own.update({t: HA_LOG_CONFIG for t in recovery_logs(spec)})
    own[spec.acks_topic] = ACKS_TOPIC_CONFIG
    return [TopicSpec(t, p, replication, {**(config or {}), **own.get(t, {})}) for t, p in spec.all_topics()]


def owned_topics(spec: Spec) -> list[str]:
    """The topics that belong to the deployment alone: all of its own, the coordinator's, and none
    that a source shares by name (``topic:``)."""
    shared = {sd.topic for sd in spec.streams.values() if sd.topic}
    return [t for t, _ in spec.all_topics() if t not in shared] + internal_topics(spec)
