"""Fetching the jars a pom lists, once, with Maven: the Kafka broker and the Spark connectors.

The copy lands in a staging folder renamed into place under a file lock, so concurrent test
workers or stages never see a half-filled classpath; a marker holding the pom's hash makes a
version bump refetch.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Sequence

from services.core.errors import HastreamError
from services.core.paths import REPO_ROOT

MARKER_FILE = ".hastream-jars"
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


class MavenError(HastreamError, RuntimeError):
    """The jars could not be fetched; the message is one line saying why."""


def pom_properties(pom: Path) -> dict[str, str]:
    """The ``<properties>`` of a pom: the single source of its pinned versions."""
    props = ET.parse(pom).getroot().find("m:properties", _NS)
    if props is None:
        return {}
    return {child.tag.split("}", 1)[-1]: (child.text or "").strip() for child in props}


def first_error_line(output: str) -> str:
    """Condense Maven's multi-screen failure into the one line that says what went wrong."""
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("[ERROR]").strip() for line in lines if line.startswith("[ERROR]")]
    errors = [e for e in errors if e and not e.startswith(("[Help", "To see", "Re-run", "For more"))]
    if not errors:
        return lines[-1] if lines else "no output"
    first = re.sub(r"\s*->\s*\[Help \d+\]\s*$", "", errors[0])
    return re.sub(r"^Failed to execute goal on project [^:]+:\s*", "", first)


def _marker(pom: Path) -> str:
    return f"pom.sha256={hashlib.sha256(pom.read_bytes()).hexdigest()}\n"


def _complete(folder: Path, pom: Path, required: Sequence[str]) -> list[Path] | None:
    """The jars of a complete, current copy, or None."""
    marker = folder / MARKER_FILE
    if not marker.is_file() or marker.read_text() != _marker(pom):
        return None
    jars = sorted(folder.glob("*.jar"))
    names = [j.name for j in jars]
    if not all(any(n.startswith(p) for n in names) for p in required):
        return None
    return jars


def fetch_jars(pom: Path, target: Path, what: str, required: Sequence[str], timeout: float = 900) -> list[Path]:
    """Jars of ``pom``'s runtime dependencies in ``target``, running Maven only when needed.

    ``required`` are name prefixes that a usable copy must contain; ``what`` names the jars
    in error messages.
    """
    jars = _complete(target, pom, required)
    if jars is not None:
        return jars
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}-jars.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        jars = _complete(target, pom, required)
        if jars is not None:
            return jars
        mvn = shutil.which("mvn")
        if mvn is None:
            raise MavenError(f"Maven ('mvn') is not on PATH; it is needed once to fetch the {what}")
        staging = target.parent / f".{target.name}-staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            mvn,
            "-q",
            "-B",
            "-Dstyle.color=never",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, timeout=timeout)
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging, ignore_errors=True)
            raise MavenError(f"mvn did not finish fetching the {what} within {timeout:.0f} s") from None
        staging.mkdir(parents=True, exist_ok=True)
        (staging / MARKER_FILE).write_text(_marker(pom))
        if proc.returncode != 0 or _complete(staging, pom, required) is None:
            shutil.rmtree(staging, ignore_errors=True)
            detail = (
                first_error_line(proc.stdout + "\n" + proc.stderr)
                if proc.returncode
                else "required jars missing after copy"
            )
            raise MavenError(f"mvn could not fetch the {what}: {detail}")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    jars = _complete(target, pom, required)
    assert jars is not None
    return jars
