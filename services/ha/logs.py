"""The logs the HA schemes recover from: a node's input logs are its backup queues (upstream
backup replays them, passive standby replays them from a checkpoint) and its output logs are
what a takeover continues. Only trimming (``services.log.trim``) may shorten them: time or
size retention would delete tuples a recovery still needs, silently turning a rollback or
precise recovery into gap recovery.
"""

from __future__ import annotations

from services.spec.model import Spec

TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


def recovery_logs(spec: Spec) -> set[str]:
    """The topics of every stream an HA-scheme node reads or writes (amnesia needs none: it restarts at the end)."""
    out: set[str] = set()
    for n, nd in spec.nodes.items():
        if not nd.ha.scheme.kind.keeps_logs:
            continue
        for s in (*spec.node_inputs(n), *spec.node_outputs(n)):
            out.update(spec.stream_topics(s))
    return out
