"""The pacing loop of ``hastream produce``: records sent through a ``SourceWriter`` at a rate.

A live source keeps its promise of time while it has no data too, so the loop sends the
writer's periodic boundaries while it waits for the rate, while reading records blocks (stdin),
and while a held writer waits for release; and it never ends with tuples left unsent.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from services.client.source import SourceWriter


def pump(
    writer: SourceWriter,
    records: Iterable[dict[str, Any]],
    rate: float = 0,
    progress: Callable[[int], None] | None = None,
    stop: Callable[[], bool] | None = None,
    on_record_error: Callable[[int, Exception], None] | None = None,
    wait_release: bool = True,
    on_wait: Callable[[int], None] | None = None,
    final_boundary: int | None = None,
    blocking: bool = False,
) -> int:
    """Send ``records`` at ``rate`` per second (0: as fast as possible) with periodic boundaries.

    Boundaries go out every ``boundary_interval``, also while waiting for the rate (not
    while blocked inside ``records``, e.g. on stdin), plus a final one at the end, also
    when stopped early: at ``final_boundary`` if given (a source that ends for good), else
    at the largest stime sent. If the writer is held at the end and ``wait_release``, it waits
    (``on_wait(buffered)`` is called once) until released, or until ``stop()``, Ctrl-C or
    ``writer.stop_requested``, which release: no tuple is left unsent. ``stop()`` is
    checked between records. ``blocking`` says reading ``records`` may wait (stdin): they are
    then read by a thread, and boundaries go on while none come (an idle but live source).
    Returns the number of records sent.
    """
    pacer = _Pacer(writer, rate, max(0.01, writer.boundary_interval_s), stop, progress, on_record_error)
    try:
        pacer.send_all(_prefetched(records, pacer.tick) if blocking else records)
        writer.boundary(final_boundary)  # the final promise: nothing older will follow
        if wait_release:
            pacer.wait_release(on_wait)
    finally:
        _flush_all(writer)
    return pacer.sent


@dataclass
class _Pacer:
    """One run of ``pump``: the writer, the rate it keeps, when it stops, and the records sent so far."""

    writer: SourceWriter
    rate: float
    tick: float  # the longest sleep between two looks at the writer: its boundary interval
    stop: Callable[[], bool] | None
    progress: Callable[[int], None] | None
    on_record_error: Callable[[int, Exception], None] | None
    t0: float = field(default_factory=time.monotonic)
    sent: int = 0

    def stopped(self) -> bool:
        return self.writer.stop_requested or (self.stop is not None and self.stop())

    def send_all(self, records: Iterable[dict[str, Any] | None]) -> None:
        """Send until the records end or a stop; Ctrl-C ends it as cleanly. None is a tick without records."""
        try:
            for rec in records:
                if rec is None:  # nothing to read for a tick: the source is idle, not gone
                    self.writer.maybe_boundary()
                elif not self.send(rec):
                    continue
                if self.stopped():
                    break
        except KeyboardInterrupt:
            self.writer.stop_requested = True  # interrupted: end now, but cleanly
        if self.progress is not None:
            self.progress(self.sent)

    def send(self, rec: dict[str, Any]) -> bool:
        """Send one record, then keep the rate; False if it did not fit and ``on_record_error`` took it."""
        try:
            self.writer.send(rec)
        except (ValueError, TypeError, KeyError) as e:
            if self.on_record_error is None:
                raise
            self.on_record_error(self.sent + 1, e)
            return False
        self.sent += 1
        if self.progress is not None and self.sent % 100 == 0:
            self.progress(self.sent)
        self.writer.maybe_boundary()
        if self.rate > 0:
            self.keep_rate()
        return True

    def keep_rate(self) -> None:
        """Wait until the rate allows the next record, sending boundaries meanwhile (a live source)."""
        while True:
            ahead = self.sent / self.rate - (time.monotonic() - self.t0)
            if ahead <= 0 or self.writer.stop_requested:
                break
            self.writer.producer.poll(0)
            time.sleep(min(ahead, self.tick))
            self.writer.maybe_boundary()

    def wait_release(self, on_wait: Callable[[int], None] | None) -> None:
        """A writer held at the end waits until released or stopped, with boundaries (``on_wait`` told once)."""
        if not self.writer.held_or_pending or self.stopped():
            return
        if on_wait is not None:
            on_wait(self.writer.held_count)
        try:
            while self.writer.held_or_pending and not self.stopped():
                time.sleep(self.tick)
                self.writer.maybe_boundary()
        except KeyboardInterrupt:
            pass


def _flush_all(writer: SourceWriter) -> None:
    """Wait for every produced message, and send what is still held."""
    writer.flush()
    if writer.held:
        writer.release()  # never leave tuples unsent: they arrive late instead
        writer.flush()


_DONE = object()


def _prefetched(records: Iterable[dict[str, Any]], tick: float) -> Iterator[dict[str, Any] | None]:
    """``records`` read by a thread, with None whenever none came for ``tick`` seconds; an error
    reading them is raised here."""
    q: queue.Queue[Any] = queue.Queue(maxsize=10_000)

    def read() -> None:
        try:
            for r in records:
                q.put(r)
            q.put(_DONE)
        except BaseException as e:  # handed to the pump, which raises it
            q.put(e)

    threading.Thread(target=read, name="records", daemon=True).start()
    while True:
        try:
            r = q.get(timeout=tick)
        except queue.Empty:
            yield None
            continue
        if r is _DONE:
            return
        if isinstance(r, BaseException):
            raise r
        yield r
