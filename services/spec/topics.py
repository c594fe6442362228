"""The broker settings a spec's topics need, as the scheme descriptors of its nodes say
(``SchemeKind.topics``): the deployment asks here, so a new scheme's topics get what they need from
its descriptor alone, and nothing imports a scheme's module for them.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.spec.model import Spec
from services.spec.schemes import NodeTopic
from services.spec.stores import STORES


def topic_configs(spec: Spec) -> dict[str, Mapping[str, str]]:
    """Topic -> the settings its nodes' schemes give it; a topic no scheme names is absent. Kinds are
    applied in ``NodeTopic`` order, so a topic of two kinds takes the later one's settings."""
    out: dict[str, Mapping[str, str]] = {}
    for kind in NodeTopic:
        for name, node in spec.nodes.items():
            config = node.ha.scheme.kind.topics.get(kind)
            if node.store is not None:  # its store's needs come over its scheme's
                config = STORES[node.store].topics.get(kind, config)
            if config is not None:
                out.update(dict.fromkeys(node_topics(spec, name, kind), config))
    return out


def node_topics(spec: Spec, node: str, kind: NodeTopic) -> list[str]:
    """The topics of ``node`` that are of ``kind`` (a stream internal to a node has none)."""
    if kind is NodeTopic.RESTART:
        return [spec.restart_topic(node, r) for r in range(spec.nodes[node].replicas)]
    if kind is NodeTopic.ACKS:
        return [spec.acks_topic]
    streams = spec.node_inputs(node) if kind is NodeTopic.INPUTS else spec.node_outputs(node)
    return [t for s in streams for t in spec.stream_topics(s)]


def all_topics(spec: Spec) -> list[tuple[str, int]]:
    """Every topic of the deployment with its partition count."""
    out = [(t, spec.topic_partitions(s)) for s in spec.streams for t in spec.stream_topics(s)]
    out.append((spec.deadletter_topic, 1))
    out.append((spec.heartbeat_topic, 1))
    out.append((spec.control_topic, 1))
    out.extend(restart_topics(spec))
    if any(nd.ha.scheme.acks for nd in spec.nodes.values()):
        out.append((spec.acks_topic, 1))
    return out


def restart_topics(spec: Spec) -> list[tuple[str, int]]:
    """Every restart topic with its partition count (one partition per node partition)."""
    topics = {
        spec.restart_topic(n, r): spec.node_partitions(n) for n, nd in spec.nodes.items() for r in range(nd.replicas)
    }
    return list(topics.items())
