"""The HA experiments' specs (no broker): every run of every experiment must be a spec hastream accepts,
or the orchestrator finds out minutes into a full run."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from bench.ha import experiments as ex
from bench.ha.points import failed, points
from bench.ha.run import Config, client_outage, spec_text
from bench.harness import Received
from services.core.tuples import TupleType
from services.spec import parse_spec


def _configs() -> list[Config]:
    return sorted({c for make in ex.EXPERIMENTS.values() for quick in (True, False) for c in make(quick)}, key=str)


@pytest.mark.parametrize("c", _configs(), ids=lambda c: f"{c.label} window={c.window} advance={c.advance}")
def test_every_experiments_spec_validates(c: Config, tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(c, "u"))
    spec = parse_spec(path.read_text(), str(path), path)  # as ``bench.ha.run`` loads it
    assert spec.nodes["n"].ha.scheme.value == c.scheme


def test_table_6_has_its_union_rows_under_every_scheme() -> None:
    union = {c.scheme for c in ex.classes(quick=False) if c.workload == "union" and c.recovery == "precise"}
    assert union == {"amnesia", *ex.SCHEMES}


def _run(scheme: str, repeat: int, recovery_ms: int, **more: object) -> dict[str, object]:
    c = {**asdict(Config(scheme)), "recovery": more.pop("recovery", "precise")}
    base = {"config": c, "repeat": repeat, "recovery_ms": recovery_ms, "precise": True, "duplicates": 0}
    return {**base, "cpu_primary_s": 1.0, "cpu_secondary_s": 0.5, "span_s": 4.0, **more}


def test_a_point_is_the_median_of_its_runs_with_their_range() -> None:
    runs = [_run("passive_standby", k, ms) for k, ms in enumerate((70, 90, 50, 300, 80))]
    runs.append({"config": asdict(Config("passive_standby")), "error": "TimeoutError: no primary"})
    (p,) = points(runs)
    assert p.median("recovery_ms") == 80 and p.spread("recovery_ms") == (50, 300)
    assert p.cell("recovery_ms") == "80 (50–300)"
    assert failed(runs) == 1 and len(p.runs) == 5


def test_cpu_overhead_is_taken_against_the_amnesia_run_of_the_same_round() -> None:
    runs = [_run("amnesia", 0, 1, cpu_secondary_s=0.0), _run("amnesia", 1, 1, cpu_primary_s=2.0, cpu_secondary_s=0.0)]
    runs += [_run("active_standby", k, 30, cpu_primary_s=2.0, cpu_secondary_s=2.0) for k in (0, 1)]
    (_, standby) = points(runs)
    assert standby.values("cpu_pct") == [300.0, 100.0]


def test_a_point_shows_a_rollback_as_repeating_and_a_lost_run_as_not_precise() -> None:
    rolled = [
        _run("upstream_backup", k, 60, recovery="rollback", precise=False, client_exact=True, duplicates=d)
        for k, d in ((0, 3), (1, 7))
    ]
    assert points(rolled)[0].guarantee() == "repeating, 3–7 duplicates"
    lost = [_run("upstream_backup", 0, 60), _run("upstream_backup", 1, 60, precise=False, duplicates=None)]
    assert points(lost)[0].guarantee() == "NOT precise in 1 of 2"


def _arrivals(*pairs: tuple[int, float]) -> list[Received]:
    return [Received("out", 0, TupleType.STABLE, i, 0, None, at) for i, at in pairs]


def test_the_client_outage_is_the_silence_after_what_the_old_primary_had_sent() -> None:
    """Results written just before the kill (ids 3, 4) reach the client just after it; the outage is the
    silence that follows them, until the new primary's first new result (id 5), whose repeats (id 4
    again) do not end it; a pause after the new primary caught up is not part of it."""
    got = _arrivals((2, 9.99), (3, 10.001), (4, 10.002), (4, 10.30), (5, 10.45), (6, 10.52), (7, 12.0))
    assert client_outage(got, killed=10.0, caught=10.5) == 0.448
    assert client_outage(_arrivals((2, 9.99), (3, 10.2)), killed=10.0, caught=10.1) == 0.2
    assert client_outage(_arrivals((2, 9.99)), killed=10.0, caught=10.1) is None
