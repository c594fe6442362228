"""What every Borealis experiment shares: the broker, the progress reporter, machine facts, plot footers,
the page's templates.

Experiments are modules exposing ``run(quick, progress) -> dict``, ``plot(result, docs_dir) ->
list[Path]`` and ``section(result) -> str``; ``bench/borealis/__main__.py`` runs them on one
broker, keeps their results in ``bench/results/borealis.json`` and writes
``docs/experiments.md`` from their sections.

The page's prose lives in ``docs/templates/<module>.md``, not in the code: each file holds
named blocks (``<!-- block: NAME -->`` on a line of its own, then the text up to the next
block, trailing newlines excluded) with ``$placeholders`` (``string.Template``). A section
fills them with its run's numbers (``fill``) and picks which apply; the code keeps only the
numbers, their formatting and the tables' rows.

The broker: while experiments run, ``HASTREAM_BOOTSTRAP`` names it (the orchestrator sets it
after starting an embedded one), so an experiment calls ``bootstrap()`` and never starts its
own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import shutil
import tempfile
import time
from pathlib import Path
from string import Template
from typing import Any, Callable, Iterator

from services.core.paths import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results" / "borealis.json"
DOCS = REPO_ROOT / "docs"
TEMPLATES = DOCS / "templates"
_BLOCK = re.compile(r"^<!-- block: ([\w-]+) -->\n", re.MULTILINE)


@functools.cache
def templates(name: str) -> dict[str, Template]:
    """The named blocks of ``docs/templates/<name>.md`` (what precedes the first block is a comment)."""
    parts = _BLOCK.split((TEMPLATES / f"{name}.md").read_text())
    return {key: Template(text.rstrip("\n")) for key, text in zip(parts[1::2], parts[2::2], strict=True)}


def fill(template: str, block: str, /, **values: object) -> str:
    """Block ``block`` of ``docs/templates/<template>.md`` with its placeholders filled (each one must be given)."""
    return templates(template)[block].substitute({k: str(v) for k, v in values.items()})


class Progress:
    """How an experiment reports progress; the orchestrator backs it with a rich progress bar.

    ``progress.plan(n)`` adds ``n`` steps (runs) to the total; ``progress("k=2 Process & Process")``
    says what runs now; ``progress.advance()`` marks one step done; ``progress.note(text)``
    prints a line above the bar (one per run, never per tuple).
    """

    def __init__(self, update: Callable[..., None] | None = None, log: Callable[[str], None] | None = None) -> None:
        self._update = update or (lambda **_: None)
        self._log = log or (lambda s: None)
        self.total = 0
        self.done: float = 0

    def __call__(self, description: str | None = None, advance: float = 0) -> None:
        if advance:
            self.done += advance
        kw: dict[str, Any] = {"completed": self.done, "total": max(self.total, self.done) or None}
        if description is not None:
            kw["description"] = description
        self._update(**kw)

    def plan(self, steps: int) -> None:
        self.total += steps
        self()

    def advance(self, steps: float = 1) -> None:
        self(advance=steps)

    def note(self, text: str) -> None:
        self._log(text)


def bootstrap() -> str:
    """The broker experiments run on (the orchestrator guarantees ``HASTREAM_BOOTSTRAP``)."""
    bs = os.environ.get("HASTREAM_BOOTSTRAP")
    if not bs:
        raise RuntimeError("HASTREAM_BOOTSTRAP is not set: run experiments through 'hastream bench borealis'")
    return bs


@contextlib.contextmanager
def broker(log: Callable[[str], None] = print) -> Iterator[dict[str, Any]]:
    """``HASTREAM_BOOTSTRAP`` if set, else an embedded 1-broker KRaft cluster in a temp dir,
    stopped and deleted afterwards. Yields facts about it for the results file."""
    given = os.environ.get("HASTREAM_BOOTSTRAP")
    if given:
        yield {"bootstrap": given, "broker": "external (HASTREAM_BOOTSTRAP)", "kafka": "not probed"}
        return
    from infra.kafka.cluster import KAFKA_VERSION, KafkaCluster

    tmp = Path(tempfile.mkdtemp(prefix="hastream-borealis-"))
    t0 = time.monotonic()
    cluster = KafkaCluster(brokers=1, data_dir=tmp / "kafka").start()
    log(f"broker up at {cluster.bootstrap} in {time.monotonic() - t0:.1f}s")
    os.environ["HASTREAM_BOOTSTRAP"] = cluster.bootstrap
    try:
        yield {"bootstrap": cluster.bootstrap, "broker": "embedded 1-broker KRaft", "kafka": KAFKA_VERSION}
    finally:
        os.environ.pop("HASTREAM_BOOTSTRAP", None)
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def host() -> dict[str, Any]:
    """Core count, CPU model (from /proc/cpuinfo), platform and Python: results on 2 cores are not
    results on 32."""
    cpu = ""
    try:
        cpu = next(
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu or platform.processor() or "unknown",
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def machine(broker_facts: dict[str, Any]) -> dict[str, Any]:
    """Hardware and versions, stated with every figure: the host, the Kafka client and the broker."""
    import confluent_kafka

    v = confluent_kafka.version()  # a (str, int) tuple in older releases, a str in newer ones
    return {
        **host(),
        "confluent_kafka": v[0] if isinstance(v, tuple) else str(v),
        "librdkafka": confluent_kafka.libversion()[0],
        "kafka": broker_facts.get("kafka"),
        "broker": broker_facts.get("broker"),
    }


def footer(m: dict[str, Any], processes: str = "every node replica and the coordinator a separate process") -> str:
    """One line of hardware for a figure."""
    return (
        f"{m.get('cores')} cores ({m.get('cpu')}), Python {m.get('python')}, Kafka {m.get('kafka')} "
        f"({m.get('broker')}), {processes}"
    )


def pyplot() -> Any:
    """matplotlib without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, title: str) -> Path:
    """Title (workload and hardware), lay out, write and close an experiment's figure."""
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def save_footnoted(fig: Any, path: Path, title: str, footnote: str) -> Path:
    """Title above, a footnote (workload and hardware) below; lay out, write and close a figure."""
    fig.suptitle(title)
    fig.text(0.01, 0.01, footnote, fontsize=8, ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def standalone(
    name: str,
    doc: str | None,
    quick_help: str,
    run: Callable,
    plot: Callable,
    section: Callable,
    argv: list[str] | None = None,
) -> None:
    """``python -m bench.borealis.<name> [--quick]``: run one experiment alone, write its JSON and figures."""
    import argparse
    import json

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    ap = argparse.ArgumentParser(prog=f"python -m bench.borealis.{name}", description=(doc or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    a = ap.parse_args(argv)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as prog:
        result = run(a.quick, prog)
    out = REPO_ROOT / "bench" / "results" / f"borealis_{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    paths = plot(result, DOCS)
    print(section(result))
    print(f"\nwrote {out} and {', '.join(map(str, paths))} in {result['elapsed_s']:.0f} s")


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A markdown table (cells already formatted)."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def seconds(v: Any) -> str:
    """A delay for a table: seconds with two decimals, or a dash when the run has none."""
    return f"{v:.2f}" if isinstance(v, (int, float)) and v == v else "–"
