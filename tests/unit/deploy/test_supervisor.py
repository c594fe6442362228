"""The launcher's supervisor: crashes come back with backoff, clean exits and held roles stay down."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from services.deploy.deployment import Deployment, Process
from services.deploy.supervisor import MAX_DELAY_S, RESET_AFTER_S, Supervisor, backoff


class FakePopen:
    pids = itertools.count(1000)

    def __init__(self) -> None:
        self.pid = next(self.pids)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Supervisor:
    monkeypatch.setenv("HASTREAM_HOME", str(tmp_path))
    dep = Deployment("d", "spec.yaml", "127.0.0.1:1")
    dep.processes = [Process("n.r0.p0", 0, str(tmp_path / "n.log"), ["true"])]
    dep.save()
    s = Supervisor(dep, spawn=lambda p: FakePopen(), clock=Clock())  # type: ignore[arg-type,return-value]
    s.start_all()
    return s


def child(s: Supervisor) -> FakePopen:
    popen = s.children[0].popen
    assert isinstance(popen, FakePopen)
    return popen


def tick(s: Supervisor, dt: float) -> None:
    assert isinstance(s.clock, Clock)
    s.clock.now += dt
    s.step()


def test_backoff_doubles_from_a_tenth_of_a_second_up_to_a_cap() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.4, 0.8]
    assert backoff(50) == MAX_DELAY_S


def test_a_crash_is_restarted_after_its_backoff_and_counted(sup: Supervisor) -> None:
    first = child(sup)
    first.returncode = -9  # kill -9
    tick(sup, 0.01)
    assert sup.children[0].popen is None  # waiting out the backoff
    tick(sup, backoff(1))
    again = child(sup)
    assert again is not first
    saved = Deployment.load("d").processes[0]
    assert (saved.pid, saved.restarts) == (again.pid, 1)
    assert "crashed (killed by signal 9)" in Path(saved.log).read_text()


def test_crashes_in_a_row_back_off_longer_until_a_long_run(sup: Supervisor) -> None:
    for crashes in (1, 2, 3):
        child(sup).returncode = 1
        tick(sup, 0.01)
        tick(sup, backoff(crashes) - 0.02)
        assert sup.children[0].popen is None, f"restarted before backoff({crashes})"
        tick(sup, 0.02)
        assert sup.children[0].running()
    tick(sup, RESET_AFTER_S)  # ran long enough: the next crash is a first one again
    child(sup).returncode = 1
    tick(sup, 0.01)
    tick(sup, backoff(1))
    assert sup.children[0].running() and sup.children[0].proc.restarts == 4


def test_a_clean_exit_is_not_restarted(sup: Supervisor) -> None:
    child(sup).returncode = 0
    for _ in range(5):
        tick(sup, MAX_DELAY_S)
    assert sup.children[0].popen is None and sup.children[0].proc.restarts == 0


def test_a_held_role_stays_down_until_a_restart_is_asked_for(sup: Supervisor) -> None:
    sup.dep.hold("n.r0.p0")  # what `hastream fault kill` does before its kill -9
    child(sup).returncode = -9
    for _ in range(5):
        tick(sup, MAX_DELAY_S)
    assert sup.children[0].popen is None
    sup.dep.request_restart("n.r0.p0")  # `hastream fault restart`
    tick(sup, 0.01)  # at once: no backoff
    assert sup.children[0].running() and not sup.dep.held("n.r0.p0")
    assert Deployment.load("d").processes[0].restarts == 1


def test_a_process_that_outlives_its_stop_time_is_killed_and_named(caplog: pytest.LogCaptureFixture) -> None:
    """Stopping waits ``timeout`` after SIGTERM, then kills what is left and says which process it was."""
    import subprocess
    import sys

    from services.deploy import processes

    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
    with caplog.at_level("WARNING", logger="hastream.processes"):
        processes.stop([stubborn], timeout=0.3)
    assert stubborn.wait(5) == -9
    assert f"pid {stubborn.pid} (" in caplog.text and "did not end within 0.3 s of SIGTERM: killed" in caplog.text
