"""Reading a coordinator's JSON status over HTTP, for the CLI and the tests (stdlib only, no faust import)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any


def status_url(port: int, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{port}/status"


def fetch_status(url: str, timeout: float = 2.0) -> dict[str, Any]:
    """GET the coordinator's /status; raises OSError (URLError, timeouts) when it is unreachable."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body = resp.read()
    try:
        return json.loads(body.decode())
    except ValueError as e:  # not our JSON: something else listens on that port
        raise ConnectionError(f"{url}: not a coordinator status ({e})") from None


def wait_ready(url: str, timeout: float = 30.0) -> dict[str, Any]:
    """Poll a coordinator's /status until it reports ready (used by tests and tools)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            st = fetch_status(url, timeout=1.0)
            if st.get("ready"):
                return st
        except OSError as e:
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"coordinator at {url} not ready after {timeout:.0f} s ({last})")
