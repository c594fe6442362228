"""What the coordinator tells of its replicas beyond their states, from their heartbeats: how far an
HA secondary is behind its primary (standby lag), and a replica whose process keeps restarting (a
crash loop: the supervisor restarts it, and it dies again, as a bad spec or a lost log does).

Kafka-free: ``heard`` takes each heartbeat once the backlog is read (an old heartbeat's process is
no restart), and an epoch claim is no heartbeat of the replica (it comes from whoever claims).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from services.control.messages import Heartbeat

LOOP_STARTS = 3  # new processes of one replica within LOOP_WINDOW_S: a crash loop
LOOP_WINDOW_S = 120.0


@dataclass
class _Replica:
    pid: int = 0
    starts: deque[float] = field(default_factory=deque)  # when each new process was first heard
    role: str = ""
    held: int = 0
    checkpoint_ms: int = -1


Key = tuple[str, int, int]  # (node, partition, replica)


class Health:
    """Each replica's standby lag and restarts, as its newest heartbeats say."""

    def __init__(self) -> None:
        self._replicas: dict[Key, _Replica] = {}

    def heard(self, beat: Heartbeat, now: float) -> str | None:
        """Take ``beat`` (read at ``now``); returns a warning line when its replica starts crash-looping."""
        key = (beat.node, beat.partition, beat.replica)
        r = self._replicas.setdefault(key, _Replica())
        was = self._looping(r, now)
        if beat.pid and beat.pid != r.pid:
            if r.pid:
                r.starts.append(now)  # a process after one heard before: a restart
            r.pid = beat.pid
        r.role, r.held, r.checkpoint_ms = beat.role, beat.held, beat.checkpoint_ms
        if self._looping(r, now) and not was:
            return (
                f"{beat.node} p{beat.partition} r{beat.replica} is crash-looping: {len(r.starts)} new processes "
                f"in {LOOP_WINDOW_S:.0f} s (see its log for why it exits)"
            )
        return None

    def looping(self, now: float) -> list[Key]:
        """The replicas restarted ``LOOP_STARTS`` times or more within the last ``LOOP_WINDOW_S``."""
        return sorted(k for k, r in self._replicas.items() if self._looping(r, now))

    def standby(self, now_ms: int) -> list[dict[str, object]]:
        """Per HA secondary: results it holds the log does not have (active standby) and the age of the
        checkpoint it holds (passive standby, seconds; None: none)."""
        return [
            {
                "node": n,
                "partition": p,
                "replica": rep,
                "held": r.held,
                "checkpoint_lag_s": None if r.checkpoint_ms < 0 else max(0, now_ms - r.checkpoint_ms) / 1000,
            }
            for (n, p, rep), r in sorted(self._replicas.items())
            if r.role == "secondary"
        ]

    @staticmethod
    def _looping(r: _Replica, now: float) -> bool:
        while r.starts and now - r.starts[0] > LOOP_WINDOW_S:
            r.starts.popleft()
        return len(r.starts) >= LOOP_STARTS
