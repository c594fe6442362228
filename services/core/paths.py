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
    """Folder holding the Maven-fetched jars of ``kind`` (``kafka``)."""
    return hastream_home() / "jars" / kind


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (it holds a password), whole or not at all."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)
    tmp.replace(path)
