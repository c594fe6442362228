"""A scheme keeps the state store its node's plan names (``state:``), built from the store's
descriptor (``services.spec.stores``) rather than named by the scheme."""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import cast

import pytest

from services.core.factories import factory
from services.ha.checkpoints import Checkpoints
from services.node.path import StablePath
from services.node.scheme import NodeRuntime
from services.node.state import RestartImages, StateStore, build_store
from services.spec import parse_spec
from services.spec.plan import plan_node
from services.spec.stores import STORES
from tests.unit.dpc.fake_node import CHAIN, CHAIN_TEXT, FakeNode

ONE_NODE = """\
name: one
streams:
  a: {schema: reading, key: sensor}
  b: {schema: reading, key: sensor}
operators:
  f: {type: filter, input: a, output: b, where: "True"}
nodes:
  n: {operators: [f], replicas: 2, HA}
"""


def test_every_registered_store_names_a_class_with_every_store_method() -> None:
    methods = [m for m in dir(StateStore) if not m.startswith("_")]
    assert {"busy", "take", "recover", "wait", "new_chain"} <= set(methods)
    for name, kind in STORES.items():
        cls = factory(kind.factory)
        assert inspect.isclass(cls), name
        assert [m for m in methods if not hasattr(cls, m)] == [], f"{name}: {cls.__name__} lacks some"


@pytest.mark.parametrize(
    "text", [CHAIN_TEXT, CHAIN_TEXT.replace("n1: {operators: [up]}", "n1: {operators: [up], state: restart_images}")]
)
def test_a_dpc_node_keeps_the_restart_images_its_plan_names(text: str) -> None:
    node = FakeNode(parse_spec(text), "n1", replica=1)
    assert node.plan.state == "restart_images"
    store = node.scheme.store
    assert type(store) is RestartImages and store.topic == "chain.restart.n1.r1"


@pytest.mark.parametrize("ha", ["ha: {scheme: passive_standby}", "ha: {scheme: passive_standby}, state: checkpoints"])
def test_a_passive_standby_node_keeps_the_checkpoints_its_plan_names(ha: str) -> None:
    node = FakeNode(parse_spec(ONE_NODE.replace("HA", ha)), "n", replica=1)
    assert node.plan.state == "checkpoints"
    store = node.scheme.store
    assert type(store) is Checkpoints and store.topic == "one.restart.n"


def test_a_node_whose_scheme_keeps_no_state_has_no_store_to_build() -> None:
    plan = plan_node(parse_spec(ONE_NODE.replace("HA", "ha: {scheme: upstream_backup}")), "n")
    assert plan.state is None
    with pytest.raises(ValueError, match="node 'n' runs upstream_backup, which keeps no state store"):
        build_store(cast(NodeRuntime, SimpleNamespace(plan=plan)), "one.restart.n", cast(StablePath, None))
    assert plan_node(CHAIN, "n2").state == "restart_images"
