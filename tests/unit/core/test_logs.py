"""The one log format, the throttle on client-library repeats, and one log file per run."""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

from services.core.logs import LineFormatter, RepeatFilter, rotate, setup_logging

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (\w+) (\S+) (\S+) (.*)$")


def record(msg: str, *args: object, name: str = "hastream.test", **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)
    for k, v in extra.items():
        setattr(rec, k, v)
    return rec


def test_a_line_is_time_level_service_logger_message_and_key_values() -> None:
    line = LineFormatter("n1.r0.p0").format(record("input %s moved", "s1", topic="merged.r1", why="a b"))
    m = LINE.match(line)
    assert m is not None, line
    assert m.groups() == ("WARNING", "n1.r0.p0", "hastream.test", 'input s1 moved topic=merged.r1 why="a b"')


def test_a_traceback_stays_on_its_line() -> None:
    rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed:\nhere", (), None)
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        rec.exc_info = sys.exc_info()
    line = LineFormatter("coordinator").format(rec)
    assert "\n" not in line and "exc=" in line and "ValueError" in line


def test_client_library_repeats_are_counted_not_printed() -> None:
    now = [0.0]
    f = RepeatFilter(window_s=30, clock=lambda: now[0])
    lines = [record("Connect to 127.0.0.1:%d failed", 9000 + i, name="hastream.librdkafka") for i in range(50)]
    assert [f.filter(r) for r in lines[:3]] == [True, False, False]  # numbers do not make a line new
    assert all(not f.filter(r) for r in lines[3:])
    now[0] = 31.0
    again = record("Connect to 127.0.0.1:9999 failed", name="hastream.librdkafka")
    assert f.filter(again) and again.repeated == 49  # type: ignore[attr-defined]
    assert all(f.filter(record("reconciled %d tuples", i)) for i in range(5))  # hastream's own lines all pass


def test_setup_sends_every_logger_through_the_one_format() -> None:
    buf = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        setup_logging("supervisor", stream=buf)
        logging.getLogger("hastream.supervisor").info("started %s", "n1.r0.p0")
        logging.getLogger("faust.worker").info("narrating its start-up")  # held at WARNING
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1 and LINE.match(lines[0]) and " supervisor hastream.supervisor started n1.r0.p0" in lines[0]


def test_each_run_starts_a_new_log_and_keeps_the_last_ones(tmp_path: Path) -> None:
    log = tmp_path / "n1.r0.p0.log"
    for run in range(5):
        rotate(log, keep=3)
        log.write_text(f"run {run}\n")
    assert log.read_text() == "run 4\n"
    assert (tmp_path / "n1.r0.p0.log.1").read_text() == "run 3\n"
    assert (tmp_path / "n1.r0.p0.log.2").read_text() == "run 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n1.r0.p0.log", "n1.r0.p0.log.1", "n1.r0.p0.log.2"]
