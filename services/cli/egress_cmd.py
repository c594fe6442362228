"""``hastream egress SPEC STREAM``: write one egress topic of a stream (its ``egress:`` in the spec) until stopped.

Any Kafka consumer reading the topic with ``isolation.level=read_committed`` gets each stable
tuple once, in id order per partition, as a plain record (``services.egress``). A process started
again, or a second one, takes every partition over and goes on where the last commit left it.
"""

from __future__ import annotations

import signal
import time
from typing import Annotated

import typer

from services.cli.common import BootstrapOpt, SpecArg, bootstrap_for, fail, out, service_logging, spec_or_exit
from services.core.errors import HastreamError


def egress(
    spec: SpecArg,
    stream: Annotated[str, typer.Argument(help="A node's output stream with 'egress:' in the spec.")],
    mode: Annotated[str, typer.Option(help="Which of its egresses: stable or latest.")] = "stable",
    idle: Annotated[float, typer.Option(help="Stop after this many seconds without tuples (0 = never).")] = 0,
    bootstrap: BootstrapOpt = None,
) -> None:
    """Write a stream's egress topic for any read_committed consumer, until SIGTERM."""
    from services.egress.pump import EgressPump

    s = spec_or_exit(spec)
    if stream not in s.streams:
        raise fail(f"no stream '{stream}' in {spec} (streams: {', '.join(s.streams)})")
    egresses = {e.mode: e for e in s.streams[stream].egress}
    if mode not in egresses:
        have = ", ".join(egresses) or "none"
        raise fail(f"stream '{stream}' has no '{mode}' egress in {spec} (its egresses: {have}): add it under 'egress:'")
    service_logging(f"egress.{stream}.{mode}")
    running = [True]

    def stop(*_: object) -> None:
        running[0] = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        pump = EgressPump(s, stream, egresses[mode], bootstrap_for(s, bootstrap, stream))
    except HastreamError as e:
        raise fail(str(e)) from None
    last = time.monotonic()
    try:
        while running[0] and not (idle and time.monotonic() - last > idle):
            if pump.step():
                last = time.monotonic()
    except HastreamError as e:  # fenced by a newer egress process, or a gap in the stream: say which
        raise fail(str(e)) from None
    finally:
        pump.close()
    written = sum(w.written for w in pump.stable)
    out.print(f"egress {stream} ({mode}) to {pump.topic} stopped: {written} stable tuples written")
