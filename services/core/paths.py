"""Where hastream keeps its local state: jars, broker data, deployment state.

One place so the launcher, the CLI, the tests and Spark agree without passing paths around.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO_ROOT / "schemas"


def hastream_home() -> Path:
    """Root of local state (``HASTREAM_HOME``, default ``<repo>/.hastream``)."""
    home = Path(os.environ.get("HASTREAM_HOME", REPO_ROOT / ".hastream"))
    home.mkdir(parents=True, exist_ok=True)
    return home


def jars_dir(kind: str) -> Path:
    """Folder holding the Maven-fetched jars of ``kind`` (``kafka`` or ``spark``)."""
    return hastream_home() / "jars" / kind
