"""The layers contract places every module of the packages it splits across layers.

``.importlinter`` names the packages of the lower layers whole, but the paper packages
(``services.dpc``, ``services.ha``) module by module: their pure protocol cores sit below the
node, their schemes above it. A module it does not name would escape the check.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _layered() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    return set(re.findall(r"[a-z_][a-z_.]*", cfg["importlinter:contract:layers"]["layers"]))


def test_every_module_of_a_split_package_is_in_a_layer() -> None:
    layered = _layered()
    split = {name.rsplit(".", 1)[0] for name in layered if name.count(".") == 2}
    assert split, "the contract names no module of a split package"
    for package in sorted(split):
        folder = ROOT / package.replace(".", "/")
        modules = {f"{package}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"}
        assert modules - layered == set(), f"{package}: modules in no layer of .importlinter"


def test_every_package_of_services_is_in_a_layer() -> None:
    layered = _layered()
    for folder in sorted((ROOT / "services").iterdir()):
        if (folder / "__init__.py").exists():
            name = f"services.{folder.name}"
            assert name in layered or any(m.startswith(name + ".") for m in layered), f"{name} is in no layer"
