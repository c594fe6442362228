"""The worker process, both sides: ``worker_main`` runs one job in it and reports JSON lines on
stdout (``jobs.report``); ``Worker`` starts it from the harness and reads them, so the harness's
own work (pacing, progress) never competes with the processor for the GIL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from bench.throughput.jobs import Job, peers_python, report
from bench.throughput.processors import run_avro, run_bare, run_node
from bench.workload import WINDOW_SIZE_MS, WINDOW_SLIDE_MS
from services.core.config import Settings
from services.core.paths import REPO_ROOT
from services.deploy import processes

# ---------------------------------------------------------------------------- worker side


def worker_main(raw: str) -> None:
    job = Job(**json.loads(raw))
    st = Settings.from_env(job.bootstrap)
    cpu0 = time.process_time()
    run = {"bare": run_bare, "avro": run_avro}.get(job.kind, run_node)
    res = run(job, st)
    res["cpu_s"] = time.process_time() - cpu0
    res.update(_own_and_children_usage())
    report("done", **res)


def _own_and_children_usage() -> dict[str, float]:
    """Peak memory of this process, and CPU and peak memory of its child processes (a Spark node's JVM)."""
    tick, me = os.sysconf("SC_CLK_TCK"), str(os.getpid())
    child_cpu, child_peak = 0.0, 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[1] != me:  # the parent pid
                continue
            child_cpu += (int(fields[11]) + int(fields[12])) / tick
            child_peak += _peak_rss_mb(stat.parent / "status")
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
    return {
        "rss_peak_mb": _peak_rss_mb(Path("/proc/self/status")),
        "child_cpu_s": child_cpu,
        "child_rss_peak_mb": child_peak,
    }


def _peak_rss_mb(status: Path) -> float:
    for line in status.read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# ---------------------------------------------------------------------------- harness side


class Worker:
    """A processor in its own Python process, reporting JSON lines on stdout."""

    def __init__(self, job: Job, log_dir: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.stderr_path = log_dir / f"{job.out_topic}.stderr"
        self._err = open(self.stderr_path, "w")
        if job.kind == "quix":
            py = peers_python()
            if py is None:
                raise RuntimeError("Quix Streams is not installed: run `make peers`")
            peer = dict(asdict(job), schemas=str(REPO_ROOT / "schemas"), size=WINDOW_SIZE_MS, slide=WINDOW_SLIDE_MS)
            cmd = [str(py), str(REPO_ROOT / "bench" / "quix_app.py"), json.dumps(peer)]
        else:
            cmd = [sys.executable, "-m", "bench.throughput", "--worker", json.dumps(asdict(job))]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            cwd=REPO_ROOT,
            env=env,
        )
        self.ready = threading.Event()
        self.consumed = 0
        self.result: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = ev.pop("ev", None)
            if kind == "ready":
                self.ready.set()
            elif kind == "progress":
                self.consumed = ev["consumed"]
            elif kind == "done":
                self.consumed = ev["consumed"]
                self.result = ev

    def wait(self, timeout: float, on_tick: Callable[[], None] = lambda: None) -> dict[str, Any]:
        """Wait for the worker's result; stop it (by its pid) if it overruns ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            on_tick()
            if time.monotonic() > deadline:
                processes.stop([self.proc], timeout=10)
                break
            time.sleep(0.1)
        self._reader.join(5)
        self._err.close()
        on_tick()
        if self.result is None:
            tail = self.stderr_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(
                f"worker for {self.stderr_path.stem} failed (exit {self.proc.returncode}): " + " | ".join(tail)
            )
        return self.result

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.wait(0)  # raises with the worker's stderr
                raise RuntimeError("worker ended before it was ready")
