"""The broker a local deployment runs on: the embedded one in ``<home>/kafka`` (started, resumed,
released when no running deployment uses it), and the SASL admin login a deployment provisions with.

A broker whose SASL differs from what the deployment asks for, or that refuses the admin's
login, is one RuntimeError that says what to do.
"""

from __future__ import annotations

from pathlib import Path

from services.core.login import Login
from services.core.paths import hastream_home
from services.deploy.deployment import Deployment


def embedded_broker(brokers: int = 1, sasl: bool | None = None) -> tuple[str, str]:
    """(bootstrap, data dir) of the broker in ``<home>/kafka``: resumed on its ports and data if it
    is stopped or crashed, a new one with ``brokers`` brokers (and SASL if ``sasl``) if there is none.
    A broker whose SASL differs from an explicit ``sasl`` is a RuntimeError that says what to do."""
    from infra.kafka.cluster import KafkaCluster

    kdir = hastream_home() / "kafka"
    cluster = KafkaCluster.load(kdir) if (kdir / "cluster.json").exists() else None
    if cluster is None or not cluster.stored():
        cluster = KafkaCluster(brokers=brokers, data_dir=kdir, sasl=bool(sasl)).start(detach=True)
    else:
        _check_sasl(cluster.sasl, sasl, kdir)
        if not all(cluster.alive()):
            cluster.start(detach=True)
    return cluster.bootstrap, str(kdir)


def _check_sasl(has: bool, wanted: bool | None, kdir: Path) -> None:
    """A broker without SASL for ``--sasl``, or a SASL broker for ``--no-sasl``: say what to do instead."""
    if wanted is True and not has:
        raise RuntimeError(
            f"the Kafka broker in {kdir} runs without SASL: deploy without --sasl, or stop it and start a new one "
            "with 'hastream kafka start --fresh --sasl' (which deletes its topics)"
        )
    if wanted is False and has:
        raise RuntimeError(f"the Kafka broker in {kdir} takes only SASL logins: deploy with --sasl")


def admin_login(bootstrap: str, sasl: bool | None) -> Login | None:
    """The admin login a SASL deployment on ``bootstrap`` provisions with: the embedded broker's own if
    ``bootstrap`` is it, else the environment's ($HASTREAM_SASL_USERNAME, the broker's admin); None
    without SASL (``sasl`` False, or None and ``bootstrap`` no embedded SASL broker)."""
    from infra.kafka.cluster import KafkaCluster
    from services.core.login import env_login

    kdir = hastream_home() / "kafka"
    cluster = KafkaCluster.load(kdir) if (kdir / "cluster.json").exists() else None
    if cluster is not None and cluster.stored() and cluster.bootstrap == bootstrap:
        _check_sasl(cluster.sasl, sasl, kdir)
        return Login(*cluster.admin_login()) if cluster.sasl else None
    if not sasl:
        return None
    login = env_login()
    if login is None:
        raise RuntimeError(
            f"--sasl on the Kafka broker at {bootstrap} needs its admin login: set HASTREAM_SASL_USERNAME and "
            "HASTREAM_SASL_PASSWORD"
        )
    return login


def check_login(bootstrap: str, admin: Login) -> None:
    """Fail with one line unless the broker at ``bootstrap`` takes ``admin``'s login."""
    from confluent_kafka import KafkaException

    from services.core.admin import admin_client
    from services.core.client_log import LOGIN_REFUSALS

    client = admin_client(bootstrap)
    try:
        client.list_topics(timeout=5)
    except KafkaException:
        client.poll(0)
        why = LOGIN_REFUSALS.reason(bootstrap) or "no answer"
        raise RuntimeError(
            f"the Kafka broker at {bootstrap} did not take the login of '{admin.username}': {why}"
        ) from None


def broker_users(kafka_dir: str, but: set[str]) -> list[str]:
    """Running deployments, other than ``but``, on the embedded broker in ``kafka_dir``."""
    return [d.name for d in Deployment.all() if d.name not in but and d.kafka_dir == kafka_dir and d.running()]


def release_broker(kafka_dir: str, stopping: set[str] | None = None) -> list[str]:
    """Stop the embedded broker in ``kafka_dir`` (its data stays for the next start) unless running
    deployments other than ``stopping`` use it; returns those, which keep it running."""
    from infra.kafka.cluster import KafkaCluster

    users = broker_users(kafka_dir, stopping or set())
    if not users:
        KafkaCluster.load(Path(kafka_dir)).stop()
    return users
