"""One log format for every hastream service, and logs that neither grow across runs nor drown in retries.

Every line is one event: ``ts level service logger message key=value ...`` (UTC time in
ms; ``key=value`` pairs from ``extra=``; a traceback folded onto the same line), so ``grep``,
``awk`` and log shippers read every service's log alike. Kafka client libraries repeat
the same complaint on every retry while a broker is away: a repeat within
``REPEAT_WINDOW_S`` is counted, not printed, and the next line that gets through says
how many were left out. The launcher keeps a few runs of each log (``rotate``), so one
run's log never runs on into the next.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path
from typing import IO, Any

# Loggers whose lines repeat on every retry of a client library while a broker is away.
CHATTY = ("hastream.librdkafka", "aiokafka", "kafka")
# Third-party loggers held at WARNING: their INFO lines narrate their own start-up.
QUIET = ("faust", "mode", "aiokafka", "kafka", "aiohttp.access")
REPEAT_WINDOW_S = 30.0
KEEP_RUNS = 3  # log files kept per service: this run's and the two before

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_DIGITS = re.compile(r"\d+")


def _value(v: Any) -> str:
    s = str(v)
    return f'"{s}"' if (not s or any(c in s for c in ' "=')) else s


class LineFormatter(logging.Formatter):
    """``ts level service logger message key=value``: one line per event, whatever the message holds."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        parts = [ts, record.levelname, self.service, record.name, record.getMessage()]
        parts += [f"{k}={_value(v)}" for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")]
        if record.exc_info:
            parts.append("exc=" + _value(self.formatException(record.exc_info)))
        return " ".join(parts).replace("\r", "").replace("\n", "\\n")


class RepeatFilter(logging.Filter):
    """Lets the first of a run of like lines (same logger, same text up to numbers) through per window.

    The next line of that kind after the window carries ``repeated=N``: how many were left out.
    Only the ``CHATTY`` loggers are throttled; hastream's own lines always get through.
    """

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.window_s, self.clock = window_s, clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}  # kind -> (when let through, left out since)

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(CHATTY):
            return True
        kind = (record.name, _DIGITS.sub("#", record.getMessage())[:200])
        now = self.clock()
        shown, dropped = self._seen.get(kind, (float("-inf"), 0))
        if now - shown < self.window_s:
            self._seen[kind] = (shown, dropped + 1)
            return False
        if dropped:
            record.repeated = dropped
        self._seen[kind] = (now, 0)
        if len(self._seen) > 1000:  # kinds that stopped coming
            self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window_s}
        return True


def setup_logging(service: str, level: str | int = "INFO", stream: IO[str] | None = None) -> logging.Handler:
    """Send every logger's lines to ``stream`` (stderr) in the one format, as ``service``; returns the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(LineFormatter(service))
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    if root.level > logging.DEBUG:
        for name in QUIET:
            logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("hastream.librdkafka").setLevel(logging.WARNING)
    return handler


def rotate(path: Path | str, keep: int = KEEP_RUNS) -> None:
    """Start a new log at ``path``: the last run's becomes ``path.1``, and so on; ``keep`` files in all."""
    path = Path(path)
    if keep <= 1:
        path.unlink(missing_ok=True)
        return
    for i in range(keep - 1, 0, -1):
        newer = path if i == 1 else path.with_name(f"{path.name}.{i - 1}")
        if newer.exists():
            newer.replace(path.with_name(f"{path.name}.{i}"))
