"""A deployment's topic settings come from the scheme descriptors of its nodes, and are the ones
hastream always gave: restart images, the logs HA schemes recover from, and the acks topic; and each
egress's topic (a latest one compacted)."""

from __future__ import annotations

from copy import deepcopy
from dataclasses import replace
from itertools import cycle

import pytest

from services.core.admin import TopicSpec
from services.deploy.topics import topic_specs
from services.spec import Spec, load_spec, parse_spec
from services.spec.model import HaDef, Scheme
from services.spec.schemes import KINDS, NodeTopic
from services.spec.topics import all_topics, restart_topics
from tests.unit.coordinator.test_trims import SPEC as TRIMS_SPEC
from tests.unit.spec.test_spec import BASE, REPO

# What each kind of topic was given before the descriptors said it, written out.
IMAGES = {
    "max.message.bytes": str(4 * 1024 * 1024),
    "cleanup.policy": "compact",
    "segment.ms": "60000",
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": "60000",
}
KEPT = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
ACKS = {"cleanup.policy": "compact", "segment.ms": "60000"}
READ_BACK = {Scheme.PASSIVE_STANDBY, Scheme.UPSTREAM_BACKUP, Scheme.ACTIVE_STANDBY}


def expected(spec: Spec, replication: int, config: dict[str, str]) -> list[TopicSpec]:
    """The settings as ``topic_specs`` gave them before: images on every restart topic, then no
    retention on every log an HA node that reads logs back reads or writes, then the acks topic."""
    own = {t: IMAGES for t, _ in restart_topics(spec)}
    for n, nd in spec.nodes.items():
        if nd.ha.scheme in READ_BACK:
            for s in (*spec.node_inputs(n), *spec.node_outputs(n)):
                own.update({t: KEPT for t in spec.stream_topics(s)})
    own[spec.acks_topic] = ACKS
    logs = [TopicSpec(t, p, replication, {**config, **own.get(t, {})}) for t, p in all_topics(spec)]
    plain = {"stable": {}, "latest": {"cleanup.policy": "compact"}}  # an egress's topic, after the logs
    return logs + [
        TopicSpec(e.topic or f"{spec.name}.{s}.{e.mode}", sd.partitions, replication, {**config, **plain[e.mode]})
        for s, sd in spec.streams.items()
        for e in sd.egress
    ]


def _with_schemes(spec: Spec, schemes: list[Scheme]) -> Spec:
    """``spec`` with its nodes given ``schemes`` in turn (the python engine: spark runs dpc only)."""
    for name, scheme in zip(list(spec.nodes), cycle(schemes)):
        spec.nodes[name] = replace(spec.nodes[name], ha=HaDef(scheme=scheme), engine="python")
    return spec


def _specs() -> list[tuple[str, Spec]]:
    """The specs the examples and tests load, as written and with every scheme on their nodes."""
    bases = {f.name: load_spec(f) for f in sorted((REPO / "examples").glob("*.yaml"))}
    bases.update({"base": parse_spec(BASE), "trims": TRIMS_SPEC})
    out = []
    for name, spec in bases.items():
        out.append((name, spec))
        for schemes in [[s] for s in Scheme] + [list(Scheme), list(reversed(Scheme))]:
            out.append((f"{name}/{'+'.join(s.value for s in schemes)}", _with_schemes(deepcopy(spec), schemes)))
    return out


@pytest.mark.parametrize(("replication", "config"), [(1, {}), (3, {"min.insync.replicas": "2"})])
def test_every_topic_keeps_the_settings_it_had(replication: int, config: dict[str, str]) -> None:
    for name, spec in _specs():
        assert topic_specs(spec, replication, config) == expected(spec, replication, config), name


def test_a_descriptor_alone_says_what_its_topics_need(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new scheme's topics: what its descriptor names, and nothing from any scheme's module."""
    output_log = {"cleanup.policy": "compact"}
    kind = replace(KINDS[Scheme.DPC], topics={NodeTopic.OUTPUTS: output_log})
    monkeypatch.setitem(KINDS, Scheme.DPC, kind)
    spec = parse_spec(BASE)
    got = {t.name: t.config for t in topic_specs(spec)}
    assert got["t.b.r0"] == got["t.w.r1"] == output_log  # n1's and n2's outputs, one log per replica
    assert got["t.a"] == {} and got["t.restart.n2.r0"] == {}  # a source; no images named
    assert spec.acks_topic not in got
