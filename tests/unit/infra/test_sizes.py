"""The size gate: what it reports for a module or a function over its limit, known or not."""

from __future__ import annotations

from pathlib import Path

from infra.sizes import MAX_FUNCTION, MAX_MODULE, offences


def _tree(root: Path, module_lines: int, function_lines: int) -> None:
    body = "\n".join(["    x = 1"] * (function_lines - 1))
    text = f"def f():\n{body}\n"
    text += "\n" * (module_lines - len(text.splitlines()))
    (root / "services").mkdir()
    (root / "spark_jobs").mkdir()
    (root / "services" / "m.py").write_text(text)


def test_a_tree_within_the_limits_passes(tmp_path: Path) -> None:
    _tree(tmp_path, MAX_MODULE, MAX_FUNCTION)
    assert offences(tmp_path, {}) == []


def test_a_module_and_a_function_over_their_limits_are_named(tmp_path: Path) -> None:
    _tree(tmp_path, MAX_MODULE + 1, MAX_FUNCTION + 1)
    found = offences(tmp_path, {})
    assert [line.split(":")[0:2] for line in found] == [
        ["services/m.py", f" {MAX_MODULE + 1} lines, over the limit of {MAX_MODULE}"],
        ["services/m.py", "f"],
    ]


def test_a_known_offender_may_shrink_not_grow_and_leaves_the_list_once_it_fits(tmp_path: Path) -> None:
    _tree(tmp_path, MAX_MODULE + 10, MAX_FUNCTION)
    assert offences(tmp_path, {"services/m.py": MAX_MODULE + 20}) == []
    assert "grown from" in offences(tmp_path, {"services/m.py": MAX_MODULE + 5})[0]
    (tmp_path / "services" / "m.py").write_text("x = 1\n")
    assert "remove it from KNOWN" in offences(tmp_path, {"services/m.py": MAX_MODULE + 20})[0]
