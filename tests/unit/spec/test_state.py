"""A node's ``state:`` picks the store its recovery points go to, from the registry of stores: its
scheme's default when it says nothing; a store its scheme cannot use, or any store on a scheme
that keeps no state, is refused in one line that names the node, the store and what to use."""

from __future__ import annotations

import re

import pytest

from services.spec import parse_spec
from services.spec.plan import plan_node
from services.spec.schemes import KINDS, Scheme
from services.spec.stores import STORES
from tests.unit.spec.test_spec import BASE, problems


def with_n2(keys: str) -> str:
    """BASE with ``keys`` added to node n2 (the window node, two replicas)."""
    return BASE.replace("n2: {operators: [win], replicas: 2}", "n2: {operators: [win], replicas: 2, " + keys + "}")


def test_every_scheme_names_registered_stores_its_default_first() -> None:
    for scheme, kind in KINDS.items():
        assert set(kind.stores) <= set(STORES), f"{scheme.value} names a store nobody registered"
    assert {s: k.store for s, k in KINDS.items()} == {
        Scheme.DPC: "restart_images",
        Scheme.PASSIVE_STANDBY: "checkpoints",
        Scheme.AMNESIA: None,
        Scheme.ACTIVE_STANDBY: None,
        Scheme.UPSTREAM_BACKUP: None,
    }
    assert all(kind.factory.count(":") == 1 and kind.about for kind in STORES.values())


@pytest.mark.parametrize(
    "ha, store",
    [
        ("dpc", "restart_images"),
        ("{scheme: passive_standby}", "checkpoints"),
        ("{scheme: amnesia}", None),
        ("{scheme: active_standby}", None),
        ("{scheme: upstream_backup}", None),
    ],
)
def test_a_node_keeps_its_schemes_default_store_unless_it_says(ha: str, store: str | None) -> None:
    spec = parse_spec(with_n2(f"ha: {ha}"))
    assert spec.nodes["n2"].state is None and spec.nodes["n2"].store == store
    assert plan_node(spec, "n2").state == store
    assert plan_node(spec, "n1").state == "restart_images"  # no ha: DPC's


@pytest.mark.parametrize(
    "keys, store",
    [("state: restart_images", "restart_images"), ("ha: {scheme: passive_standby}, state: checkpoints", "checkpoints")],
)
def test_state_names_the_store_its_plan_gives_the_node(keys: str, store: str) -> None:
    spec = parse_spec(with_n2(keys))
    assert spec.nodes["n2"].state == store == spec.nodes["n2"].store
    assert plan_node(spec, "n2").state == store


def test_a_store_the_scheme_cannot_use_is_refused_naming_the_ones_it_can() -> None:
    got = problems(with_n2("ha: {scheme: passive_standby}, state: restart_images"))
    assert len(got) == 1, got
    assert re.match(
        r"s\.yaml:\d+:\d+: nodes\.n2\.state: node 'n2' runs passive_standby, which keeps its state in "
        r"checkpoints only, not restart_images: use 'state: checkpoints', or leave 'state' out for its "
        r"default checkpoints$",
        got[0],
    ), got
    got = problems(with_n2("state: checkpoints"))
    assert len(got) == 1 and "node 'n2' runs dpc, which keeps its state in restart_images only" in got[0], got
    assert "use 'state: restart_images'" in got[0]


@pytest.mark.parametrize("scheme", ["amnesia", "active_standby", "upstream_backup"])
def test_a_scheme_that_keeps_no_state_refuses_any_store(scheme: str) -> None:
    got = problems(with_n2(f"ha: {{scheme: {scheme}}}, state: checkpoints"))
    assert len(got) == 1, got
    assert re.match(
        rf"s\.yaml:\d+:\d+: nodes\.n2\.state: node 'n2' runs {scheme}, which keeps no state "
        r"\(a takeover starts from the logs alone\): remove 'state: checkpoints'$",
        got[0],
    ), got


def test_a_store_nobody_registered_is_refused_naming_the_registered_ones() -> None:
    got = problems(with_n2("state: snapshots"))
    assert len(got) == 1, got
    assert got[0].endswith("nodes.n2.state: 'state' must be one of restart_images, checkpoints, got 'snapshots'"), got
    assert any("'state' must be one of" in p for p in problems(with_n2("state: [checkpoints]")))
