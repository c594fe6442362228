"""The replica vocabulary every scheme speaks: the state a replica announces and the role it holds.

States (SIGMOD 2005, Fig. 4): STABLE, UPSTREAM_FAILURE and STABILIZATION are DPC's node states;
which moves among them are allowed is DPC's rule (``services.dpc.states``). A restarted replica
of any scheme announces RECOVERING while it replays from its restart image and has not caught
up with its inputs: it sends nothing new yet, so readers prefer any partner that does (the
paper's recovering node refuses new clients until it is consistent). FAILED is never a state a
replica is in by itself: observers give it to a replica whose heartbeats stopped, which they
also do when its processing loop stalls.

Roles (ICDE 2005): the coordinator gives each replica of a node that takes turns (the HA
schemes) a role; the replica reports it in its heartbeats.
"""

from __future__ import annotations

from enum import Enum


class NodeState(str, Enum):
    STABLE = "STABLE"
    UPSTREAM_FAILURE = "UPSTREAM_FAILURE"
    STABILIZATION = "STABILIZATION"
    RECOVERING = "RECOVERING"  # announced only: restarted, replaying, not caught up with its inputs yet
    FAILED = "FAILED"  # no heartbeat within failure_timeout (set by observers, never sent)


class Role(str, Enum):
    PRIMARY = "primary"
    SECONDARY = "secondary"
    FAILED = "failed"
    CANDIDATE = "candidate"  # what a replica reports after a (re)start, until it is given a role
