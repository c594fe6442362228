"""The size gate: what it reports for a module or a function over its limit."""

from __future__ import annotations

from pathlib import Path

from infra.sizes import MAX_FUNCTION, MAX_MODULE, offences


def _tree(root: Path, module_lines: int, function_lines: int) -> None:
    body = "\n".join(["    x = 1"] * (function_lines - 1))
    text = f"class C:\n    def f(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
    text += "\n" * (module_lines - len(text.splitlines()))
    (root / "services").mkdir()
    (root / "spark_jobs").mkdir()
    (root / "services" / "m.py").write_text(text)


def test_a_tree_within_the_limits_passes(tmp_path: Path) -> None:
    _tree(tmp_path, MAX_MODULE, MAX_FUNCTION)
    assert offences(tmp_path) == []


def test_a_module_and_a_method_over_their_limits_are_named(tmp_path: Path) -> None:
    _tree(tmp_path, MAX_MODULE + 1, MAX_FUNCTION + 1)
    assert offences(tmp_path) == [
        f"services/m.py: {MAX_MODULE + 1} lines, over the limit of {MAX_MODULE}: split it along its jobs",
        f"services/m.py:C.f: {MAX_FUNCTION + 1} lines, over the limit of {MAX_FUNCTION}: split it along its jobs",
    ]
