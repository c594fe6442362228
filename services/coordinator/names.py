"""The coordinator's names on Kafka, apart from the faust app that uses them, for whoever needs
them without starting faust (the ACLs of ``services.deploy.access``)."""

from __future__ import annotations

from services.spec import Spec

TABLES = ("replicas", "reconciliation")  # the coordinator's faust tables, each with a changelog topic


def app_id(spec: Spec) -> str:
    """The faust app id: its consumer group, and the prefix of the topics faust names itself."""
    return f"hastream-{spec.name}-coordinator"


def internal_topics(spec: Spec) -> list[str]:
    """The topics faust makes for the app: each table's changelog, and the leader assignor's topic
    (faust's naming, checked against faust's own in the unit tests)."""
    aid = app_id(spec)
    return [f"{aid}-{table}-changelog" for table in TABLES] + [f"{aid}-__assignor-__leader"]
