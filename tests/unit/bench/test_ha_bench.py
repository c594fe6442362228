"""The HA experiments' specs (no broker): every run of every experiment must be a spec hastream accepts,
or the orchestrator finds out minutes into a full run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.ha import experiments as ex
from bench.ha.run import Config, spec_text
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
