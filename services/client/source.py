"""Writing to an input stream, as a source does: key partitioning, dense ids, tuple time, boundaries.

A Borealis DPC source promises, with periodic BOUNDARY tuples, that no later tuple of a
partition will have a smaller tuple time (stime). That promise is what lets a downstream
SUnion tell a quiet input from a failed one, so a source sends boundaries even while it has
no data. ``SourceWriter.hold()`` models a source that is cut off (the fault "stop-source"):
tuples keep being generated but reach Kafka only when the source is ``release()``d, late.
The pacing loop of ``hastream produce`` is ``pump.py``; the readings it generates, ``workload.py``.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

from services.core.codec import codec_for, schema_header
from services.core.errors import WriterConflictError
from services.core.kafka import BatchProducer
from services.core.partitioner import key_bytes, partition_for
from services.core.tuples import TupleType, header_writer
from services.log.writer_tail import NO_WRITER, WriterTail, writer_tail
from services.spec import Spec

# The stime of a source's final boundary: no tuple will ever come after it, so downstream
# nodes stop waiting for the stream (its windows close, its buckets are complete).
END_OF_TIME = 2**62


def wall_ms() -> int:
    return int(time.time() * 1000)


class SourceWriter:
    """Produces records of one source stream with the ``ht`` header, and BOUNDARY tuples.

    The tuple id is dense per partition and continues across writer restarts; the ``stime``
    is the record's ``ts`` field (event time), or the wall clock if it has none.
    ``wall_clock=True`` says the records' ``ts`` is the wall clock at generation (a live
    source), so a boundary may promise "now" even when no tuple was sent for a while.

    Not thread-safe; from a signal handler use ``request_hold``, which only sets a flag
    that the next ``send``/``boundary``/``maybe_boundary`` applies.
    """

    def __init__(
        self,
        spec: Spec,
        stream: str,
        bootstrap: str,
        linger_ms: int = 5,
        wall_clock: bool = False,
        exclusive: bool = False,
    ) -> None:
        raw = spec.raw_of(stream)
        if raw is not None:  # fed through an ingress: plain records to its raw topic, like any client's
            stream = raw.name
        if stream not in spec.sources():
            raise ValueError(f"'{stream}' is not an input stream of the spec (inputs: {', '.join(spec.sources())})")
        sd = spec.streams[stream]
        self.stream = stream
        self.topic, self.partitions, self.key = spec.topic(stream), sd.partitions, sd.key
        self.codec = codec_for(sd.schema)
        # A raw topic takes plain values and has many writers: no ids, no epochs, no boundaries but the last.
        self.plain = sd.ingress is not None
        self.json = sd.ingress is not None and sd.ingress.format == "json"
        tails = [NO_WRITER if self.plain else writer_tail(bootstrap, self.topic, p) for p in range(self.partitions)]
        if exclusive and not self.plain:
            _check_alone(stream, tails, spec.dpc.boundary_interval)
        self.producer = BatchProducer(bootstrap, linger_ms=linger_ms)
        self.next_id = [t.next_id for t in tails]
        # One past every earlier writer's: readers drop what an older writer still sends (EpochGate).
        self.epoch = max(t.epoch for t in tails) + 1
        self.headers = header_writer(0, self.epoch, schema_header(sd.schema))
        self.sent = 0  # data tuples accepted by send() (produced or held)
        self.boundaries = 0  # boundary rounds sent (one BOUNDARY per partition each)
        self.wall_clock = wall_clock
        self.max_stime: int | None = None  # largest stime of any data tuple sent
        self.last_boundary: int | None = None  # stime of the last boundary: never goes back
        self.late = 0  # data tuples whose stime was below an earlier boundary (a broken promise)
        self.boundary_interval_s = spec.dpc.boundary_interval / 1000.0
        self._last_boundary_at = float("-inf")
        self._held: list[tuple] | None = None  # buffered (topic, value, key, partition, headers) while held
        self._want_hold: bool | None = None
        self.stop_requested = False  # set by SIGINT/SIGTERM (install_signal_handlers): pump ends

    # -- data -----------------------------------------------------------------
    def send(self, rec: dict[str, Any], ttype: TupleType = TupleType.STABLE) -> None:
        if self._want_hold is not None:
            self._apply_request()
        key = key_bytes(rec[self.key]) if self.key else None
        p = partition_for(key, self.partitions) if key is not None else self.sent % self.partitions
        stime = rec.get("ts")
        if stime is None:
            stime = wall_ms()
            self.wall_clock = True  # this writer stamps tuple time itself: "now" is a safe boundary
        value = self.codec.encode(rec)  # before taking an id: a record that does not fit raises here
        if self.plain:
            self._produce(json.dumps(rec).encode() if self.json else value, key, p, None)
            self.sent += 1
            return
        tid = self.next_id[p]
        self.next_id[p] = tid + 1
        if self.max_stime is None or stime > self.max_stime:
            self.max_stime = stime
        if self.last_boundary is not None and stime < self.last_boundary:
            self.late += 1
        self._produce(value, key, p, self.headers(ttype, tid, stime))
        self.sent += 1
        if self.sent % 10000 == 0:
            self.producer.poll(0)

    def _produce(self, value: bytes | None, key: bytes | None, p: int, headers: list | None) -> None:
        if self._held is not None:
            self._held.append((self.topic, value, key, p, headers))
        else:
            self.producer.send(self.topic, value, key, p, headers)

    # -- boundaries -----------------------------------------------------------
    def boundary(self, stime: int | None = None) -> int | None:
        """Send a BOUNDARY to every partition: no later tuple will have a smaller stime.

        ``stime`` defaults to the largest stime sent (the wall clock if the writer's tuple
        time is the wall clock). Boundaries never go back in time, and one that would not move
        time on is not sent. The id is the last one sent on the partition (-1 if none).
        Returns the boundary's stime, or None when nothing was sent (no tuple sent, no wall
        clock, or time has not moved).
        """
        if self._want_hold is not None:
            self._apply_request()
        b = stime
        if b is None:
            b = self.max_stime
            if self.wall_clock:
                b = wall_ms() if b is None else max(b, wall_ms())
        if b is None:
            return None
        if self.last_boundary is not None and b <= self.last_boundary:
            return None  # time has not moved: a repeated promise tells a node nothing
        if self.plain and b < END_OF_TIME:
            return None  # the ingress moves time on from what all producers write; only the end is told
        for p in range(self.partitions):
            self._produce(None, None, p, self.headers(TupleType.BOUNDARY, self.next_id[p] - 1, b))
        self.last_boundary = b
        self.boundaries += 1
        self._last_boundary_at = time.monotonic()
        if self._held is None:
            self.producer.poll(0)
        return b

    def maybe_boundary(self, now: float | None = None) -> int | None:
        """Send a boundary if ``spec.dpc.boundary_interval`` passed since the last one.

        ``now`` is ``time.monotonic()`` (read if not given); cheap enough to call per batch.
        """
        if self._want_hold is not None:
            self._apply_request()
        now = time.monotonic() if now is None else now
        if now - self._last_boundary_at < self.boundary_interval_s:
            return None
        return self.boundary()

    # -- stop-source fault ----------------------------------------------------
    @property
    def held(self) -> bool:
        return self._held is not None

    @property
    def held_count(self) -> int:
        """Messages (tuples and boundaries) waiting for ``release()``."""
        return len(self._held) if self._held is not None else 0

    @property
    def held_or_pending(self) -> bool:
        """Held, or asked to hold by a signal not applied yet."""
        return self._want_hold if self._want_hold is not None else self._held is not None

    def hold(self) -> None:
        """Disconnect: keep accepting tuples but buffer them in memory instead of producing."""
        if self._held is None:
            self._held = []

    def release(self) -> int:
        """Reconnect: produce every buffered message in order; returns how many."""
        held, self._held = self._held, None
        for topic, value, key, p, headers in held or ():
            self.producer.send(topic, value, key, p, headers)
        self.producer.poll(0)
        return len(held or ())

    def request_hold(self, hold: bool) -> None:
        """Signal-safe hold/release: applied by the next send, boundary or maybe_boundary call."""
        self._want_hold = hold

    def _apply_request(self) -> None:
        want, self._want_hold = self._want_hold, None
        if want:
            self.hold()
        elif want is not None:
            self.release()

    def install_signal_handlers(self, graceful_stop: bool = True) -> None:
        """SIGUSR1 = hold, SIGUSR2 = release (what ``hastream fault stop-source`` sends).

        With ``graceful_stop``, SIGINT/SIGTERM set ``stop_requested`` (``pump`` ends between
        two tuples, sends the final boundary and everything held); a second one raises
        KeyboardInterrupt. Interrupting ``send`` halfway could leave a hole in the ids.
        """
        signal.signal(signal.SIGUSR1, lambda *_: self.request_hold(True))
        signal.signal(signal.SIGUSR2, lambda *_: self.request_hold(False))
        if graceful_stop:

            def stop(*_: object) -> None:
                if self.stop_requested:
                    raise KeyboardInterrupt
                self.stop_requested = True

            signal.signal(signal.SIGINT, stop)
            signal.signal(signal.SIGTERM, stop)

    def end(self) -> int:
        """The final boundary: the stream is over, downstream results no longer wait for it."""
        self.release()
        self.boundary(END_OF_TIME)
        self.flush()
        return END_OF_TIME

    def flush(self) -> None:
        """Wait until every produced message is acknowledged (held ones stay held)."""
        if self._want_hold is not None:
            self._apply_request()
        self.producer.flush()


def _check_alone(stream: str, tails: list[WriterTail], boundary_interval_ms: int) -> None:
    """Refuse to write a stream another writer is writing now, or one that has ended.

    A live writer sends a boundary at least every ``boundary_interval``, so a newest message
    younger than a few of those means it is still there. Two writers would hand out the
    same ids, and readers reject the second's (an input stream has one writer).
    """
    if any(t.boundary and t.stime >= END_OF_TIME for t in tails):
        raise WriterConflictError(
            f"stream '{stream}' has ended (its last producer sent the final boundary), so its results are final "
            "and new tuples would be late; start a new deployment, or pass --keep-open to producers that should "
            "leave the stream open"
        )
    newest = max(t.written_ms for t in tails)
    quiet_ms = wall_ms() - newest
    if newest and quiet_ms < max(1000, 5 * boundary_interval_ms):
        raise WriterConflictError(
            f"stream '{stream}' is being written by another producer (its last message is {quiet_ms} ms old): an "
            "input stream has one writer; wait until it ends, or declare an ingress on the stream to take records "
            "from several producers"
        )
