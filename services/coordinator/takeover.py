"""Who is primary: the coordinator's takeover decisions for nodes of the HA schemes, Kafka-free.

ICDE 2005, section 2: each node N has a backup N' that detects N's failure by keep-alives and
takes over; a failed node that returns becomes the secondary. Here the coordinator does the
detecting, so that one party decides and a paused primary cannot go on believing it leads:

- a replica is failed once no heartbeat has come for its node's detection time (``misses``
  keep-alive intervals: 3 at 100 ms gives the paper's 250 ms on average);
- when the primary fails, the lowest-numbered live secondary becomes primary with the
  partition's epoch bumped, which fences the old primary's writes;
- a failed replica that is heard again, a restarted process or a paused one that woke up,
  rejoins as secondary at the current epoch; but a primary that was only slow (its heartbeats
  held while a takeover read Kafka) and reports the current epoch, with no one elected since,
  stays primary;
- with no primary (at start, or after both failed) the lowest-numbered live replica is elected
  once every replica has been heard or a detection time has passed;
- silence is evidence only while the coordinator's view is current: a heartbeat counts from when
  it was sent, and when the newest heartbeat it has read (its own included) was sent more than a
  detection time ago, or its own heartbeat comes back later than that, its own reading stalls or
  lags (a loaded machine, a slow broker, a coordinator just restarted), not every replica at once:
  no replica is failed and no one is elected for it, and once its view is current again, not
  before a detection time has passed (the heartbeats read late may still hold every replica's
  newest);
- another replica's heartbeat read late shows that this replica is slow (its process starved, its
  producer behind), not that the coordinator lags: it holds up no one else's takeover, and gives
  that replica a detection time from its reading before its silence counts.

Each decision is an ``Order`` the coordinator sends on the control topic. A replica reports
its role and epoch in its heartbeats; one that disagrees with the table gets its order again.

An election is two steps when the epochs are claimed on Kafka (``claims``): ``check`` picks the
new primary and leaves an ``Election`` for the caller to claim an epoch for, off the event loop
and beside other partitions' claims; ``claimed`` then gives the orders, unless the election went
stale meanwhile (its replica fell silent, a primary appeared), and ``unclaimed`` (a failed
claim) or ``CLAIM_S`` without an answer lets the next check elect again. A claim is made only
for an election: an epoch claimed ahead would fence the live primary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.control.states import Role

CLAIM_S = 5.0  # an election whose epoch claim has not come back by then is made again


@dataclass(frozen=True)
class Order:
    """Replica ``replica`` of ``node`` partition ``partition`` is now ``role``, at ``epoch``."""

    node: str
    partition: int
    replica: int
    role: Role
    epoch: int


@dataclass(frozen=True)
class Election:
    """Replica ``replica`` of ``node`` partition ``partition`` is chosen as primary at ``at``, once an
    epoch is claimed for it (``ticket`` tells this election from a later one)."""

    node: str
    partition: int
    replica: int
    ticket: int
    at: float


@dataclass
class _Pair:
    replicas: int
    detection_s: float
    known_since: float
    epoch: int = 0
    roles: dict[int, Role] = field(default_factory=dict)
    seen: dict[int, float] = field(default_factory=dict)
    sent: dict[int, float] = field(default_factory=dict)  # when each replica was last given its order
    since: dict[int, float] = field(default_factory=dict)  # when each replica took its current role
    pids: dict[int, int] = field(default_factory=dict)  # each replica's process, as its heartbeats say
    given: dict[int, int] = field(default_factory=dict)  # the process each replica's last order went to
    behind: set[int] = field(default_factory=set)  # replicas whose heartbeats say they are still catching up
    late: dict[int, float] = field(default_factory=dict)  # when a heartbeat of each replica was last read late
    primary_was: int | None = None  # the replica last given the primary's role
    failed_at: float | None = None  # a takeover under way: when its old primary was last heard
    took: float | None = None  # the last takeover: from then until the new primary had caught up
    electing: Election | None = None  # an election waiting for its epoch claim

    def primary(self) -> int | None:
        return next((r for r, role in self.roles.items() if role is Role.PRIMARY), None)

    def live(self, now: float) -> list[int]:
        return sorted(r for r, t in self.seen.items() if now - t <= self.detection_s)


class Takeovers:
    """The role table of every partition of the HA nodes, fed with heartbeats and the clock."""

    def __init__(self, nodes: dict[str, tuple[int, float]], claims: bool = False) -> None:
        """``nodes``: node -> (replicas, detection time in seconds); ``claims``: new epochs are claimed
        by the caller for each ``Election`` (else one past the partition's last, for tests)."""
        self.nodes = nodes
        self.claims = claims
        self.elections: list[Election] = []  # elections whose epochs the caller is to claim
        self._tickets = 0
        self._pairs: dict[tuple[str, int], _Pair] = {}
        self.takeovers = 0  # primaries replaced since this coordinator started
        self.read_at = float("-inf")  # when the newest heartbeat the coordinator read was sent
        self.current_since = float("inf")  # the last heartbeat read a detection time or more after it was sent
        self.lag_s = min((d for _, d in nodes.values()), default=float("inf"))  # the view lags past this

    def intake(self, sent_at: float, now: float | None = None, own: bool = True) -> None:
        """A heartbeat sent at ``sent_at`` was read at ``now``: ``own``, the coordinator's (read late,
        its view lags), else anyone's (read late, its sender is slow)."""
        now = sent_at if now is None else now
        if self.current_since == float("inf") or (own and now - sent_at > self.lag_s):
            self.current_since = now  # read late: the view lags (or this is the first heartbeat)
        self.read_at = max(self.read_at, sent_at)

    def view(self, now: float) -> float:
        """When silence is judged: at the send time of the newest heartbeat read, not at ``now``. Read in
        send order, every live replica has one sent within a keep-alive of it, so a coordinator behind
        in its reading (a backlog after a pause, a loop held up) fails no one for its own lag."""
        return min(now, self.read_at)

    def _settled(self, p: _Pair, now: float) -> bool:
        """Whether silence is evidence: something recent was read, and nothing was read late for a detection time."""
        return now - self.read_at <= p.detection_s and now - self.current_since >= p.detection_s

    def role(self, node: str, partition: int, replica: int) -> Role | None:
        p = self._pairs.get((node, partition))
        return p.roles.get(replica) if p else None

    def epoch(self, node: str, partition: int) -> int:
        p = self._pairs.get((node, partition))
        return p.epoch if p else 0

    def table(self) -> list[dict[str, object]]:
        """Every known replica's role and its partition's epoch, for the status page."""
        return [
            {"node": node, "partition": part, "replica": r, "role": role.value, "epoch": p.epoch}
            for (node, part), p in sorted(self._pairs.items())
            for r, role in sorted(p.roles.items())
        ]

    def health(self, now: float) -> list[dict[str, object]]:
        """Per node partition: its live replicas (one left: vulnerable, a failure now is an outage) and
        how long its last takeover took, from its old primary's last heartbeat to the new one caught up."""
        return [
            {"node": node, "partition": part, "live": len(p.live(self.view(now))), "takeover_s": p.took}
            for (node, part), p in sorted(self._pairs.items())
        ]

    def heard(
        self,
        node: str,
        partition: int,
        replica: int,
        now: float,
        reported: tuple[Role, int] | None = None,
        sent_at: float | None = None,
        pid: int | None = None,
        catching_up: bool = False,
    ) -> list[Order]:
        """A heartbeat came from the replica; ``reported`` is the role and epoch it says it has, as of
        ``sent_at`` (when it was sent, on the clock of ``now``; None: just now), from process ``pid``;
        ``catching_up``: it says it is still recovering (an active standby rebuilding after it joined)."""
        if node not in self.nodes:
            return []
        replicas, detection_s = self.nodes[node]
        sent = now if sent_at is None else sent_at
        self.intake(sent, now, own=False)
        p = self._pairs.setdefault((node, partition), _Pair(replicas, detection_s, now))
        p.seen[replica] = max(p.seen.get(replica, sent), sent)
        if now - sent > detection_s:
            p.late[replica] = now
        if pid is not None:
            p.pids[replica] = pid
        (p.behind.add if catching_up else p.behind.discard)(replica)
        if p.failed_at is not None and not catching_up and reported == (Role.PRIMARY, p.epoch):
            p.took, p.failed_at = now - p.failed_at, None  # the new primary has caught up
        if sent_at is not None and sent_at < p.sent.get(replica, float("-inf")):
            reported = None  # sent before its last order, read late: it says nothing of that order
        role = p.roles.get(replica)
        if reported is not None and reported[0] is Role.CANDIDATE:
            if role is None and p.primary() is not None:  # it came up after the election: it joins as secondary
                return [self._give(p, node, partition, replica, Role.SECONDARY, now)]
            overdue = now - p.sent.get(replica, float("-inf")) > p.detection_s
            if role not in (None, Role.FAILED) and overdue and pid is not None and p.given.get(replica) == pid:
                # the process its order went to has not read it yet (a loaded machine): not a restart
                return [self._give(p, node, partition, replica, role, now)]
            if role is None or not overdue:
                return []  # the election takes it once due; or its order is on the way
            if role is not Role.FAILED:  # restarted within the detection time: what it held is gone,
                p.roles[replica] = role = Role.FAILED  # as if it had been detected
        elif role is None and reported is not None and reported[0] is not Role.FAILED:
            return self._adopt(p, node, partition, replica, reported, now)
        if role is Role.FAILED:  # back: a new process, or an old one that woke up
            if reported == (Role.PRIMARY, p.epoch) and p.primary() is None and p.electing is None:
                # The primary stood still past the detection time (a takeover's reads on a loaded
                # machine, a pause) and no one took over: its epoch is still the newest, no one
                # else wrote, so it stays primary rather than being demoted and elected again.
                return [self._give(p, node, partition, replica, Role.PRIMARY, now)]
            return [self._give(p, node, partition, replica, Role.SECONDARY, now)]
        if role is not None and reported is not None and reported != (role, p.epoch):
            if now - p.sent.get(replica, float("-inf")) > p.detection_s:  # its order was lost or is late
                return [self._give(p, node, partition, replica, role, now)]
        return []

    def check(self, now: float) -> list[Order]:
        """Fail the replicas that fell silent, hand the primary's role on, elect where there is none."""
        orders: list[Order] = []
        at = self.view(now)
        for (node, partition), p in sorted(self._pairs.items()):
            live = p.live(at)
            settled = self._settled(p, now)  # else the silence may be the coordinator's own
            for r, role in sorted(p.roles.items()):
                if role is not Role.FAILED and r not in live and settled and now - p.late.get(r, -1e9) >= p.detection_s:
                    p.roles[r] = Role.FAILED
            if p.electing is not None and now - p.electing.at > CLAIM_S:
                p.electing = None  # its claim hangs (a broker down): elect again
            heard_all = len(p.seen) == p.replicas and now - self.read_at <= p.detection_s
            due = heard_all or (now - p.known_since >= p.detection_s and settled)
            if p.primary() is None and p.electing is None and live and due:
                orders.extend(self._elect(p, node, partition, live, now))
        return orders

    def take_elections(self) -> list[Election]:
        """The elections made since the last call, whose epochs the caller claims."""
        out, self.elections = self.elections, []
        return out

    def claimed(self, e: Election, epoch: int, now: float) -> list[Order]:
        """``epoch`` was claimed for ``e``: its orders, unless it went stale (another election took
        its place, its replica was failed meanwhile, a primary appeared); then the next check elects again."""
        p = self._pairs[(e.node, e.partition)]
        if p.electing != e:
            return []
        p.electing = None
        if p.roles.get(e.replica) is Role.FAILED or p.primary() is not None:
            return []  # however long the claim took: only a failure seen meanwhile makes it stale
        return self._appoint(p, e.node, e.partition, e.replica, epoch, p.live(self.view(now)), now)

    def unclaimed(self, e: Election) -> None:
        """The claim for ``e`` failed: the next check elects again."""
        p = self._pairs[(e.node, e.partition)]
        if p.electing == e:
            p.electing = None

    def _adopt(
        self, p: _Pair, node: str, partition: int, replica: int, reported: tuple[Role, int], now: float
    ) -> list[Order]:
        """A replica this table does not know says its role (the coordinator restarted): keep it, unless
        another replica already holds the primary's role at a newer epoch."""
        role, epoch = reported
        cur = p.primary()
        if role is Role.PRIMARY and cur is not None and epoch <= p.epoch:
            return [self._give(p, node, partition, replica, Role.SECONDARY, now)]  # a stale primary: demoted
        if role is Role.PRIMARY and cur is not None:
            p.roles[cur] = Role.SECONDARY  # the newer primary wins; the other learns it from its heartbeats
        p.roles[replica], p.epoch = role, max(p.epoch, epoch)
        p.sent[replica] = now
        return []

    def _elect(self, p: _Pair, node: str, partition: int, live: list[int], now: float) -> list[Order]:
        # A caught-up secondary first (one still rebuilding is in its window of vulnerability), then the
        # one that has been secondary the longest: the warmest (a passive standby's state).
        warm = sorted((r in p.behind, p.since.get(r, now), r) for r in live if p.roles.get(r) is Role.SECONDARY)
        head = warm[0][2] if warm else live[0]
        if not self.claims:
            return self._appoint(p, node, partition, head, p.epoch + 1, live, now)
        self._tickets += 1
        p.electing = Election(node, partition, head, self._tickets, now)
        self.elections.append(p.electing)
        return []

    def _appoint(
        self, p: _Pair, node: str, partition: int, head: int, epoch: int, live: list[int], now: float
    ) -> list[Order]:
        """``head`` is primary at ``epoch`` (which fences every write of an earlier one); the rest, secondaries."""
        if p.primary_was is not None:  # a primary is replaced (not the partition's first election)
            self.takeovers += 1
            p.failed_at = p.seen.get(p.primary_was, now)
        p.epoch = epoch
        out = [self._give(p, node, partition, head, Role.PRIMARY, now)]
        out += [self._give(p, node, partition, r, Role.SECONDARY, now) for r in live if r != head]
        return out

    def _give(self, p: _Pair, node: str, partition: int, replica: int, role: Role, now: float) -> Order:
        if p.roles.get(replica) is not role:
            p.since[replica] = now
        p.roles[replica] = role
        p.sent[replica] = now
        if role is Role.PRIMARY:
            p.primary_was = replica
        if replica in p.pids:
            p.given[replica] = p.pids[replica]
        return Order(node, partition, replica, role, p.epoch)
