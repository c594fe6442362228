"""Runtime settings shared by every service, from environment variables.

The local launcher and docker-compose.yml set the same variables, so a service behaves
the same in both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from services.core.errors import ConfigError


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} must be an integer") from None


@dataclass(frozen=True)
class Settings:
    """Environment of one hastream process."""

    bootstrap: str
    batch_size: int = 1000
    linger_ms: int = 5
    poll_timeout_ms: int = 50

    @classmethod
    def from_env(cls, bootstrap: str | None = None) -> Settings:
        bs = bootstrap or os.environ.get("HASTREAM_BOOTSTRAP", "")
        if not bs:
            raise ConfigError("no Kafka bootstrap servers: set HASTREAM_BOOTSTRAP or pass --bootstrap")
        return cls(
            bootstrap=bs,
            batch_size=_int_env("HASTREAM_BATCH_SIZE", 1000),
            linger_ms=_int_env("HASTREAM_LINGER_MS", 5),
            poll_timeout_ms=_int_env("HASTREAM_POLL_TIMEOUT_MS", 50),
        )
