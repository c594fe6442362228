"""The size gate of ``make lint``: no module in services/ or spark_jobs/ over 400 lines, no function
or method there over 80.

A module that does one job stays short enough to read whole; past the limit it is doing two, and
is split along its concepts (docs/architecture.md), never squeezed.

    python -m infra.sizes        # exit 1 with one line per offence
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("services", "spark_jobs")
MAX_MODULE, MAX_FUNCTION = 400, 80


def sizes(path: Path, root: Path = ROOT) -> Iterator[tuple[str, int, int]]:
    """(name, lines, limit) of the module at ``path`` and of each function in it."""
    text = path.read_text()
    rel = path.relative_to(root).as_posix()
    yield rel, len(text.splitlines()), MAX_MODULE
    for name, node in _functions(ast.parse(text), ""):
        yield f"{rel}:{name}", (node.end_lineno or node.lineno) - node.lineno + 1, MAX_FUNCTION


def _functions(tree: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def offences(root: Path = ROOT) -> list[str]:
    """One line per module or function over its limit."""
    return [
        f"{name}: {lines} lines, over the limit of {limit}: split it along its jobs"
        for tree in TREES
        for path in sorted((root / tree).rglob("*.py"))
        for name, lines, limit in sizes(path, root)
        if lines > limit
    ]


def main() -> None:
    found = offences()
    for line in found:
        print(line)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
