"""The size gate of ``make lint``: no module in services/ or spark_jobs/ over 400 lines, no function
or method there over 80.

A module that does one job stays short enough to read whole; past the limit it is doing two, and
is split along its concepts (docs/architecture.md), never squeezed. ``KNOWN`` lists what is over
the limit today with its size then: an entry may shrink, not grow, and goes once it fits; nothing
joins it.

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

# What is over the limit today, with its size: to be split (see the layers in docs/architecture.md).
KNOWN: dict[str, int] = {
    "services/client/source.py": 402,
    "services/client/view.py": 530,
    "services/coordinator/app.py": 505,
    "services/core/kafka.py": 641,
    "services/deploy/local.py": 475,
    "services/dpc/sunion.py": 445,
    "services/node/ports.py": 599,
    "services/node/restart.py": 464,
    "services/coordinator/app.py:Coordinator._wire": 103,
    "services/dpc/consistency.py:Coordination.status": 92,
    "services/cli/streams_cmd.py:produce": 92,
    "services/cli/chain_demo.py:run_chain_demo": 86,
}


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


def offences(root: Path = ROOT, known: dict[str, int] = KNOWN) -> list[str]:
    """One line per module or function over its limit and not known at that size, and per known
    entry that now fits (take it off the list)."""
    out, seen = [], set()
    for tree in TREES:
        for path in sorted((root / tree).rglob("*.py")):
            for name, lines, limit in sizes(path, root):
                if lines <= limit:
                    continue
                seen.add(name)
                was = known.get(name)
                if was is None:
                    out.append(f"{name}: {lines} lines, over the limit of {limit}: split it along its jobs")
                elif lines > was:
                    out.append(f"{name}: {lines} lines, grown from {was} though over the limit of {limit}")
    for name in sorted(set(known) - seen):
        out.append(f"{name}: within its limit now: remove it from KNOWN in infra/sizes.py")
    return out


def main() -> None:
    found = offences()
    for line in found:
        print(line)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
