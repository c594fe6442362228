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
    assert (
        len(got) == 1
        and "node 'n2' runs dpc, which keeps its state in restart_images or cec or changelog only" in got[0]
    ), got
    assert "use 'state: restart_images' or 'state: cec' or 'state: changelog'" in got[0]


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
    assert got[0].endswith(
        "nodes.n2.state: 'state' must be one of restart_images, checkpoints, cec, changelog, got 'snapshots'"
    ), got
    assert any("'state' must be one of" in p for p in problems(with_n2("state: [checkpoints]")))


def test_checkpoint_names_the_store_and_gives_its_settings_the_rest_at_their_defaults() -> None:
    spec = parse_spec(with_n2("checkpoint: {method: cec, q: 50, cp_ms: 20}"))
    assert spec.nodes["n2"].store == "cec"
    assert plan_node(spec, "n2").params == {**STORES["cec"].params, "q": 50, "cp_ms": 20}
    assert plan_node(parse_spec(with_n2("state: cec")), "n2").params == STORES["cec"].params
    assert plan_node(parse_spec(with_n2("checkpoint: {method: restart_images}")), "n2").state == "restart_images"


@pytest.mark.parametrize(
    "keys, says",
    [
        (
            "checkpoint: {q: 5}",
            "nodes.n2.checkpoint: 'checkpoint' needs a 'method': one of restart_images, checkpoints, cec, changelog",
        ),
        ("state: cec, checkpoint: {method: cec}", "nodes.n2.checkpoint: give 'state' or 'checkpoint', not both"),
        ("checkpoint: {method: cec, q: 0}", "nodes.n2.checkpoint.q: "),
        (
            "checkpoint: {method: cec, ci: 5}",
            "nodes.n2.checkpoint.ci: unknown key 'ci' (allowed: ci_ms, cp_ms, method, q, u)",
        ),
        ("checkpoint: {method: restart_images, q: 5}", "nodes.n2.checkpoint.q: unknown key 'q' (allowed: method)"),
        ("checkpoint: {method: snapshots}", "nodes.n2.checkpoint.method: 'method' must be one of"),
        ("ha: {scheme: passive_standby}, checkpoint: {method: cec}", "use 'method: checkpoints'"),
    ],
)
def test_a_bad_checkpoint_is_refused_in_one_line_saying_what_to_fix(keys: str, says: str) -> None:
    got = problems(with_n2(keys))
    assert len(got) == 1 and says in got[0], got


@pytest.mark.parametrize(
    "text, says",
    [
        (
            BASE.replace(
                "n1: {operators: [f]}\n  n2: {operators: [win], replicas: 2}", "n2: {operators: [f, win], state: cec}"
            ),
            "node 'n2' keeps its state in cec, which checkpoints one window: give the node exactly one window operator",
        ),
        (
            with_n2("state: cec, reconciliation: undo"),
            "node 'n2' keeps its state in cec: it reconciles by checkpoint/redo, not undo/redo",
        ),
        (with_n2("state: cec, engine: spark"), "node 'n2' keeps its state in cec, which runs on engine: python"),
    ],
)
def test_a_cec_node_is_one_window_from_its_input_to_its_output(text: str, says: str) -> None:
    got = problems(text)
    assert any(says in g for g in got), got
