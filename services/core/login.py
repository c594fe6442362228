"""Who a Kafka client is to the broker: the SASL/SCRAM login a process takes from its environment.

The launcher gives each service its own user, and the broker's ACLs are granted to it; the
same login is spelled as librdkafka settings for hastream's clients and as Java client
properties for the Spark stage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

# A client's login, from its environment: the launcher gives each service its own user
# (services.deploy.access), and docker compose or a user can set the same variables.
USERNAME_ENV = "HASTREAM_SASL_USERNAME"
PASSWORD_ENV = "HASTREAM_SASL_PASSWORD"
PROTOCOL_ENV = "HASTREAM_SECURITY_PROTOCOL"
SASL_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class Login:
    """A SASL/SCRAM login: who a client is to the broker, which its ACLs are granted to."""

    username: str
    password: str
    protocol: str = "SASL_PLAINTEXT"  # or SASL_SSL

    def env(self) -> dict[str, str]:
        """The environment variables that give a process this login."""
        return {USERNAME_ENV: self.username, PASSWORD_ENV: self.password, PROTOCOL_ENV: self.protocol}


def env_login(environ: Mapping[str, str] | None = None) -> Login | None:
    """The login ``$HASTREAM_SASL_USERNAME`` / ``_PASSWORD`` give, or None (a broker without SASL)."""
    env = os.environ if environ is None else environ
    username = env.get(USERNAME_ENV, "")
    if not username:
        return None
    return Login(username, env.get(PASSWORD_ENV, ""), env.get(PROTOCOL_ENV, "") or "SASL_PLAINTEXT")


def security_conf(login: Login | None) -> dict[str, str]:
    """The librdkafka settings of ``login`` (none without one: the client talks PLAINTEXT)."""
    if login is None:
        return {}
    return {
        "security.protocol": login.protocol,
        "sasl.mechanisms": SASL_MECHANISM,
        "sasl.username": login.username,
        "sasl.password": login.password,
    }


def java_client_conf(login: Login | None) -> dict[str, str]:
    """The same login as Java Kafka client properties (the Spark stage's reader and writer)."""
    if login is None:
        return {}
    user, password = (v.replace("\\", "\\\\").replace('"', '\\"') for v in (login.username, login.password))
    return {
        "security.protocol": login.protocol,
        "sasl.mechanism": SASL_MECHANISM,
        "sasl.jaas.config": (
            f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'
        ),
    }
