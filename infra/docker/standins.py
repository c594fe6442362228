"""Stand-ins for the two images docker-compose.yml takes from a registry, for machines that reach
none: ``python:3.11-slim-bookworm`` (the Dockerfile's base) and ``apache/kafka`` (the broker).

Both are built on Debian bookworm from Debian's packages (bookworm.sh); the broker runs the jars
the local launcher runs (infra/kafka/pom.xml). Each image carries a label with the digest of what
it was built from, so a machine that keeps its images builds one again only when that changed.

    python -m infra.docker.standins      # builds what is missing or stale, prints the images
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.docker.cli import docker, run
from infra.kafka.cluster import KAFKA_VERSION, ensure_kafka_jars
from services.core.paths import hastream_home

HERE = Path(__file__).resolve().parent
BOOKWORM = "hastream-standin/bookworm"
PYTHON = "hastream-standin/python:3.11-slim-bookworm"
KAFKA = f"hastream-standin/kafka:{KAFKA_VERSION}"
LABEL = "org.hastream.standin"
HOST_CA = Path("/usr/local/share/ca-certificates")  # the machine's own CAs (a proxy's among them)


@dataclass(frozen=True)
class StandIns:
    python: str  # for the Dockerfile's PYTHON_IMAGE (compose: HASTREAM_PYTHON_IMAGE)
    kafka: str  # for the kafka service's image


def ensure_standins() -> StandIns:
    """Build the stand-in images that are missing or stale; their names."""
    run([HERE / "bookworm.sh", BOOKWORM], timeout=900)
    base = docker(["image", "inspect", "-f", "{{.Id}}", BOOKWORM]).stdout.strip()
    _build(PYTHON, "python.Dockerfile", base, {"ca": sorted(HOST_CA.glob("*.crt"))})
    scripts = sorted(p for p in (HERE / "kafka").iterdir() if p.is_file())
    jars = sorted(ensure_kafka_jars().glob("*.jar"))
    _build(KAFKA, "kafka.Dockerfile", base, {"libs": jars, "kafka": scripts})
    return StandIns(PYTHON, KAFKA)


def _build(tag: str, dockerfile: str, base: str, folders: Mapping[str, Sequence[Path]]) -> None:
    """Build ``tag`` from ``dockerfile`` with a context of ``folders``, unless its label says it
    was built from the same files on the same base."""
    digest = _digest(HERE / dockerfile, base, folders)
    have = docker(["image", "inspect", "-f", f'{{{{index .Config.Labels "{LABEL}"}}}}', tag], check=False)
    if have.returncode == 0 and have.stdout.strip() == digest:
        return
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=hastream_home(), prefix="standin-") as tmp:
        context = Path(tmp)
        for folder, files in folders.items():
            (context / folder).mkdir()
            for f in files:
                _place(f, context / folder / f.name)
        docker(["build", "--label", f"{LABEL}={digest}", "-f", HERE / dockerfile, "-t", tag, context], timeout=1200)
    print(f"built {tag} in {time.monotonic() - started:.0f} s")


def _digest(dockerfile: Path, base: str, folders: Mapping[str, Sequence[Path]]) -> str:
    h = hashlib.sha256(dockerfile.read_bytes() + base.encode())
    for folder, files in sorted(folders.items()):
        for f in files:
            h.update(f"{folder}/{f.name}:{os.access(f, os.X_OK)}".encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _place(src: Path, dst: Path) -> None:
    """A file of the build context: a hard link where the file system allows, else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


if __name__ == "__main__":
    images = ensure_standins()
    print(f"python image: {images.python}\nkafka image:  {images.kafka}")
