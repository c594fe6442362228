"""Safe, compiled field expressions for filter predicates, map fields and join outputs.

A spec writes Python-syntax expressions over a tuple's fields (``value > 20``,
``value * 1.8 + 32``; ``left.value`` in joins). Only arithmetic, comparison, boolean
logic, constants and a few pure functions are allowed, so operators stay deterministic.
Each expression is compiled once into a Python function; no per-tuple interpretation.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Iterable

from services.core.errors import ExprError

# What evaluating a valid expression on an unlucky tuple can raise (1 / 0, None + 1, int("x")).
EVAL_ERRORS = (ArithmeticError, TypeError, ValueError, KeyError, AttributeError, IndexError)

SAFE_FUNCS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
    "int": int,
    "float": float,
    "str": str,
    "len": len,
}

_ALLOWED = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.IfExp,
    ast.Dict,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.Constant,
    ast.Call,
    ast.Tuple,
    ast.List,
)


def _check(src: str, scopes: dict[str, Iterable[str]]) -> ast.Expression:
    """Parse and validate; ``scopes`` maps a record variable ('' = bare names) to its fields."""
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as e:
        raise ExprError(f"invalid expression {src!r}: {e.msg}") from None
    bare = set(scopes.get("", ()))
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ExprError(f"{type(node).__name__} is not allowed in expression {src!r}")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in SAFE_FUNCS) or node.keywords:
                raise ExprError(f"only calls to {', '.join(SAFE_FUNCS)} are allowed in expression {src!r}")
        elif isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Name) and node.value.id in scopes and node.value.id):
                named = ", ".join(s for s in scopes if s)
                raise ExprError(
                    f"attribute access is not allowed in {src!r}" + (f" (only on {named})" if named else "")
                )
            if node.attr not in set(scopes[node.value.id]):
                raise ExprError(
                    f"unknown field '{node.value.id}.{node.attr}' in {src!r} "
                    f"(fields: {', '.join(sorted(scopes[node.value.id]))})"
                )
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            p = parents.get(id(node))
            if isinstance(p, ast.Call) and p.func is node:
                continue
            if isinstance(p, ast.Attribute) and p.value is node:
                continue
            if node.id not in bare:
                fields = ", ".join(sorted(bare)) or "none; use " + ", ".join(f"{s}.<field>" for s in scopes if s)
                raise ExprError(f"unknown field '{node.id}' in {src!r} (fields: {fields})")
    assert isinstance(tree, ast.Expression)
    return tree


class _Rewrite(ast.NodeTransformer):
    """Turns ``field`` into ``r['field']`` and ``left.f`` into ``left['f']``."""

    def __init__(self, bare: set[str]) -> None:
        self.bare = bare

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.bare:
            return ast.copy_location(ast.Subscript(ast.Name("r", ast.Load()), ast.Constant(node.id), ast.Load()), node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        assert isinstance(node.value, ast.Name)
        return ast.copy_location(
            ast.Subscript(ast.Name(node.value.id, ast.Load()), ast.Constant(node.attr), ast.Load()), node
        )


def validate(src: str, fields: Iterable[str] = (), **named: Iterable[str]) -> None:
    """Raise ExprError if ``src`` is not a valid expression over these fields."""
    _check(str(src), {"": list(fields), **named})


def compile_expr(src: str, fields: Iterable[str] = (), **named: Iterable[str]) -> Callable[..., Any]:
    """Compile to ``f(r)`` (bare fields) or ``f(left, right)`` (named records)."""
    src = str(src)
    bare = set(fields)
    tree = _check(src, {"": bare, **named})
    body = _Rewrite(bare).visit(tree).body
    params = ["r"] if not named else list(named)
    fn = ast.Expression(ast.Lambda(ast.arguments([], [ast.arg(p) for p in params], None, [], [], None, []), body))
    ast.fix_missing_locations(fn)
    return eval(compile(fn, f"<expr {src}>", "eval"), {"__builtins__": {}, **SAFE_FUNCS})
