"""A node's input ports: which replica of each upstream stream it reads, and what it has from it.

DPC lets a downstream node read any replica of an upstream node. A port follows one
replica's topic at a time and switches (monitoring their heartbeats) when another replica
is in a better state: STABLE over UPSTREAM_FAILURE over STABILIZATION, never a FAILED one.
Stable tuple ids are the same on every replica, so a switch continues in the new topic
right after the last stable tuple the port has, and drops the tentative tuples it holds
(the new replica sends their stable versions, or its own tentative ones).
"""
from __future__ import annotations

from dataclasses import dataclass

from services.core.control import NodeState, ReplicaMonitor
from services.core.replicas import choose_replica
from services.core.spec import Spec


@dataclass
class InputPort:
    stream: str
    index: int  # SUnion input number
    upstream: str | None  # producing node, None for a source stream
    replicas: int
    replica: int  # the replica read now
    topics: list[str]
    last_stable: int = -1  # id of the newest stable tuple received
    switches: int = 0

    @property
    def topic(self) -> str:
        return self.topics[self.replica]

    def better_replica(self, monitor: ReplicaMonitor, partition: int) -> int | None:
        """The replica to switch to now, or None to stay."""
        if self.upstream is None or self.replicas < 2:
            return None
        states = [monitor.state(self.upstream, partition, r) for r in range(self.replicas)]
        if all(s is NodeState.FAILED for s in states):
            return None  # no news (monitor starting, or all down): keep waiting where we are
        r = choose_replica(states, self.replica)
        return r if r != self.replica else None


def input_ports(spec: Spec, node: str, replica: int) -> list[InputPort]:
    """One port per input stream; replica k of a node starts on replica k mod R upstream."""
    ports = []
    for i, s in enumerate(spec.node_inputs(node)):
        up = spec.node_producing(s)
        n = spec.replicas_of_stream(s)
        ports.append(InputPort(s, i, up.name if up else None, n, replica % n, [spec.topic(s, r) for r in range(n)]))
    return ports
