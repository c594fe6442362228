"""Where a coordinator's status page listens, and where it records the port it got.

Kept apart from the faust app (stdlib only), so the CLI finds a running coordinator's port
without importing faust.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

DEFAULT_PORT = 6066
PORT_ENV = "HASTREAM_COORDINATOR_PORT"

HOST_ENV = "HASTREAM_STATUS_HOST"
DEFAULT_HOST = "127.0.0.1"  # the page has no authentication: this machine only, unless asked


def env_host() -> str:
    """$HASTREAM_STATUS_HOST, else 127.0.0.1: the address the status page listens on."""
    return os.environ.get(HOST_ENV, "") or DEFAULT_HOST


def env_port() -> int | None:
    """$HASTREAM_COORDINATOR_PORT, if set."""
    raw = os.environ.get(PORT_ENV, "")
    try:
        return int(raw) if raw else None
    except ValueError:
        raise ValueError(f"{PORT_ENV}={raw!r} must be a port number") from None


def port_free(port: int, host: str = DEFAULT_HOST) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_file(data_dir: Path) -> Path:
    """Where a running coordinator writes its port and pid, so ``hastream status`` finds it."""
    return Path(data_dir) / "coordinator.json"
