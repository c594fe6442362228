"""One egress of one stream, every partition in one process: the stream followed as a client follows it,
each partition written through its own transactional producer.

At start each partition's producer takes its transactional id over (``init()``: an earlier writer
of it is fenced and what it left open is aborted), and a stable egress goes on after the newest
id committed to its partition (``services.egress.position``), reading the stream from there. A
latest egress reads the stream from its start: its records are upserts, so those written again
change nothing a consumer materializes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from services.client.view import StreamView
from services.core.transactions import TransactionalProducer
from services.egress.latest import LatestEgress, identity_for
from services.egress.position import last_written_id
from services.egress.records import PlainRecords
from services.egress.stable import Batches, StableEgress
from services.spec.egress import egress_topic, transactional_id
from services.spec.model import EgressDef, Spec

log = logging.getLogger(__name__)


class EgressPump:
    """The egress ``egress`` of ``stream`` (of ``partitions`` only: an egress partition's primary; None:
    every partition): call ``step`` in a loop, ``close`` at the end."""

    def __init__(
        self, spec: Spec, stream: str, egress: EgressDef, bootstrap: str, partitions: Sequence[int] | None = None
    ) -> None:
        sd = spec.streams[stream]
        self.topic = egress_topic(spec, stream, egress)
        records = PlainRecords(sd.schema, sd.key, egress.format)
        commit_s = egress.commit_ms / 1000
        owned = list(range(sd.partitions) if partitions is None else partitions)
        self.producers = {p: TransactionalProducer(bootstrap, transactional_id(spec, stream, egress, p)) for p in owned}
        for producer in self.producers.values():
            producer.init()
        stable = egress.mode == "stable"
        self.view = StreamView(spec, stream, bootstrap, stable_only=stable, keep_stable=False, partitions=owned)
        self.stable: dict[int, StableEgress] = {}
        self.latest: dict[int, LatestEgress] = {}
        if stable:
            for p, producer in self.producers.items():
                after = last_written_id(bootstrap, self.topic, p)
                self.stable[p] = StableEgress(producer, records, self.topic, p, commit_s, after)
                if after is not None:
                    self.view.resume_after(p, after)
        else:
            identity = identity_for(spec, stream)
            self.latest = {
                p: LatestEgress(producer, records, identity, self.topic, p, commit_s)
                for p, producer in self.producers.items()
            }

    def step(self, timeout: float = 0.05) -> int:
        """Read what arrived, write it, commit what is due; returns how many events were read."""
        events = self.view.poll(timeout)
        now = time.monotonic()
        for ev in events:
            if self.stable:
                if ev.kind == "stable" and ev.record is not None:
                    self.stable[ev.partition].take(ev.id, ev.stime, ev.record, now)
            else:
                self.latest[ev.partition].event(ev, now)
        for p, latest in self.latest.items():
            latest.passed(self.view.views[p].boundary, now)
        for w in self.stable.values():
            w.tick(now)
        for latest in self.latest.values():
            latest.tick(now)
        return len(events)

    def close(self) -> None:
        """Commit what is open, then let go of the producers and the view."""
        for w in self.stable.values():
            w.flush()
        for latest in self.latest.values():
            latest.flush()
        self.abandon()  # nothing is open any more

    def abandon(self) -> None:
        """Let go without committing: what is open is aborted (by this producer, or by the successor
        that fenced it), so none of it is ever read."""
        log.info(
            "%s", commit_summary([w.batches for w in self.stable.values()] + [w.batches for w in self.latest.values()])
        )
        for producer in self.producers.values():
            producer.close()
        self.view.close()


def commit_summary(batches: Sequence[Batches]) -> str:
    """How many transactions were committed and how long the newest took (p50, p99): the part of a
    record's latency the broker adds, told once when a pump stops rather than per commit."""
    took = sorted(t for b in batches for t in b.took_ms)
    n = sum(b.commits for b in batches)
    if not took:
        return f"{n} transactions committed"
    p50, p99 = took[len(took) // 2], took[min(len(took) - 1, len(took) * 99 // 100)]
    return f"{n} transactions committed; the newest {len(took)} took p50 {p50:.1f} ms, p99 {p99:.1f} ms"
