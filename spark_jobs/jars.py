"""The Spark connector jars (Kafka source/sink, Avro) fetched once with Maven.

pyspark's wheel ships Spark itself but not the Kafka and Avro connectors. Resolving them
with ``--packages`` would need Ivy at every session start (and network access); instead
``infra/spark/pom.xml`` lists exactly the missing jars, Maven copies them once into
``jars_dir("spark")``, and sessions get them through ``spark.jars``.
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

from services.core.paths import REPO_ROOT, jars_dir

POM_PATH = REPO_ROOT / "infra" / "spark" / "pom.xml"
MARKER_FILE = ".hastream-spark-jars"
# Jars whose absence means the copy is unusable (checked after Maven ran and on every call).
REQUIRED_PREFIXES = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_", "kafka-clients-", "commons-pool2-", "spark-avro_")


class SparkJarsError(RuntimeError):
    """The connector jars could not be fetched; the message is one line saying why."""


def _spark_version() -> str:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(POM_PATH).getroot().find("m:properties/m:spark.version", ns)
    return (node.text or "").strip() if node is not None else "unknown"


def _marker() -> str:
    """Changes whenever the pom does, so a version bump refetches the jars."""
    digest = hashlib.sha256(POM_PATH.read_bytes()).hexdigest()
    return f"spark.version={_spark_version()}\npom.sha256={digest}\n"


def _first_error_line(output: str) -> str:
    """Condense Maven's multi-screen failure into the line that says what went wrong."""
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("[ERROR]").strip() for line in lines if line.startswith("[ERROR]")]
    errors = [e for e in errors if e and not e.startswith(("[Help", "To see", "Re-run", "For more"))]
    if not errors:
        return lines[-1] if lines else "no output"
    first = re.sub(r"\s*->\s*\[Help \d+\]\s*$", "", errors[0])
    return re.sub(r"^Failed to execute goal on project [^:]+:\s*", "", first)


def _jars_in(folder: Path) -> list[Path] | None:
    """The jars of a complete copy, or None if the marker is stale or a required jar is missing."""
    marker = folder / MARKER_FILE
    if not marker.is_file() or marker.read_text() != _marker():
        return None
    jars = sorted(folder.glob("*.jar"))
    names = [j.name for j in jars]
    if not all(any(n.startswith(p) for n in names) for p in REQUIRED_PREFIXES):
        return None
    return jars


def ensure_spark_jars() -> list[Path]:
    """Paths of the connector jars for ``spark.jars``, running Maven on first use only.

    Maven copies into a staging folder that is renamed into place under a file lock, so
    concurrent stages never start a session on a half-copied folder.
    """
    target = jars_dir("spark")
    jars = _jars_in(target)
    if jars is not None:
        return jars
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".spark-jars.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        jars = _jars_in(target)
        if jars is not None:
            return jars
        mvn = shutil.which("mvn")
        if mvn is None:
            raise SparkJarsError("Maven ('mvn') is not on PATH; it is needed once to fetch the Spark Kafka/Avro connector jars")
        staging = target.parent / f".spark-staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM_PATH), "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, timeout=900)
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging, ignore_errors=True)
            raise SparkJarsError("mvn did not finish fetching the Spark connector jars within 15 minutes") from None
        staging.mkdir(parents=True, exist_ok=True)
        (staging / MARKER_FILE).write_text(_marker())
        if proc.returncode != 0 or _jars_in(staging) is None:
            shutil.rmtree(staging, ignore_errors=True)
            detail = _first_error_line(proc.stdout + "\n" + proc.stderr) if proc.returncode else "required jars missing after copy"
            raise SparkJarsError(f"mvn could not fetch Spark {_spark_version()} connector jars: {detail}")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    jars = _jars_in(target)
    assert jars is not None
    return jars
