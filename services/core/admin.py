"""Topic provisioning through the Kafka admin client, with retries around a broker that is starting or failing over."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from services.core.kafka import observed
from services.core.retry import retry_transient


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    replication: int = 1
    config: dict[str, str] = field(default_factory=dict)


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient(observed({"bootstrap.servers": bootstrap}))


@retry_transient
def broker_count(bootstrap: str) -> int:
    """Number of live brokers (retried while the cluster starts: a broker answers metadata with no
    broker listed until it has registered, and a count of 0 is no replication factor)."""
    md = admin_client(bootstrap).list_topics(timeout=5)
    if not md.brokers:
        raise KafkaException(KafkaError(KafkaError.BROKER_NOT_AVAILABLE, "no broker registered yet"))
    return len(md.brokers)


@retry_transient
def ensure_topics(bootstrap: str, topics: list[TopicSpec]) -> list[str]:
    """Create the topics that do not exist yet; returns the names created.

    Replication is capped at the number of live brokers so one spec works on the
    embedded single broker and on a 3-broker cluster.
    """
    if not topics:
        return []
    admin = admin_client(bootstrap)
    md = admin.list_topics(timeout=10)
    brokers = max(1, len(md.brokers))
    missing = [t for t in topics if t.name not in md.topics]
    if not missing:
        return []
    new = [
        NewTopic(
            t.name, num_partitions=t.partitions, replication_factor=min(t.replication, brokers), config=dict(t.config)
        )
        for t in missing
    ]
    created = []
    for name, fut in admin.create_topics(new, operation_timeout=30).items():
        try:
            fut.result()
            created.append(name)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    _wait_for_leaders(admin, [t.name for t in missing])
    return created


def _wait_for_leaders(admin: AdminClient, names: list[str], timeout: float = 30) -> None:
    """Return once every partition of ``names`` has a leader, so the topics are usable at once."""
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=10)
        pending = [
            n
            for n in names
            if n not in md.topics
            or md.topics[n].error is not None
            or any(p.leader < 0 for p in md.topics[n].partitions.values())
        ]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise KafkaException(
                KafkaError(KafkaError.LEADER_NOT_AVAILABLE, f"no leader yet for {', '.join(pending[:5])}")
            )
        time.sleep(0.1)


@retry_transient
def delete_topics(bootstrap: str, names: list[str], timeout: float = 30) -> list[str]:
    """Delete the topics of ``names`` that exist, and return them once the broker no longer lists
    them, so topics of the same names can be created at once."""
    if not names:
        return []
    admin = admin_client(bootstrap)
    existing = set(admin.list_topics(timeout=10).topics)
    todo = [n for n in names if n in existing]
    for fut in admin.delete_topics(todo, operation_timeout=30).values() if todo else []:
        try:
            fut.result()
        except KafkaException as e:
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
    deadline = time.monotonic() + timeout
    while todo and set(todo) & set(admin.list_topics(timeout=10).topics):
        if time.monotonic() > deadline:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"topics still listed after deletion: {todo[:5]}"))
        time.sleep(0.1)
    return todo
