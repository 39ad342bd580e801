"""Restriction strings, checked once and evaluated on whole columns of the search space.

Kernel Tuner evaluates every restriction string with ``eval`` per configuration, which
is what makes large spaces slow to build. Here a string is parsed once, its names are
checked against the tunable parameters, and it is rewritten so that ``and``/``or``/``not``
and chained comparisons work element-wise on numpy arrays: one call filters a million
configurations.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from types import CodeType
from typing import Any

import numpy as np

# Functions a restriction may call, mapped to element-wise equivalents.
_FUNCTIONS = {
    "min": "_minimum",
    "max": "_maximum",
    "abs": "_abs",
    "int": "_int",
    "float": "_float",
    "round": "_round",
}
_RUNTIME = {
    "_and": np.logical_and,
    "_or": np.logical_or,
    "_not": np.logical_not,
    "_where": np.where,
    "_minimum": np.minimum,
    "_maximum": np.maximum,
    "_abs": np.abs,
    "_int": lambda x: np.asarray(x).astype(np.int64),
    "_float": lambda x: np.asarray(x).astype(np.float64),
    "_round": np.round,
}
_ALLOWED_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.And,
    ast.Or,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.Invert,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.LShift,
    ast.RShift,
    ast.BitAnd,
    ast.BitOr,
    ast.BitXor,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Tuple,
    ast.List,
    ast.In,
    ast.NotIn,
)


class RestrictionError(ValueError):
    """A restriction string that does not parse or uses names that are not parameters."""


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


class _Vectorise(ast.NodeTransformer):
    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        self.generic_visit(node)
        fn = "_and" if isinstance(node.op, ast.And) else "_or"
        result = node.values[0]
        for value in node.values[1:]:
            result = _call(fn, result, value)
        return result

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        return _call("_not", node.operand) if isinstance(node.op, ast.Not) else node

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        self.generic_visit(node)
        return _call("_where", node.test, node.body, node.orelse)

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        parts, left = [], node.left
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                raise RestrictionError("'in' is not supported; compare with == and 'or'")
            parts.append(ast.Compare(left=left, ops=[op], comparators=[right]))
            left = right
        result: ast.expr = parts[0]
        for part in parts[1:]:
            result = _call("_and", result, part)
        return result

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        assert isinstance(node.func, ast.Name)  # parse_checked admits calls of plain names only
        node.func = ast.Name(id=_FUNCTIONS[node.func.id], ctx=ast.Load())
        return node


def parse_checked(text: str, param_names: list[str]) -> tuple[ast.Expression, list[str]]:
    """Parse an expression over tunable parameters, refusing anything else: attributes,
    subscripts, lambdas, calls other than a few numeric functions, unknown names. Also used
    for grid_div expressions, so both accept the same language."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise RestrictionError(f"{text!r} does not parse: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise RestrictionError(f"{text!r} uses {type(node).__name__}, which is not allowed")
        if isinstance(node, ast.Call) and (
            not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS or node.keywords
        ):
            raise RestrictionError(f"{text!r} calls something other than {', '.join(sorted(_FUNCTIONS))}")
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called
    unknown = sorted(names - set(param_names))
    if unknown:
        raise RestrictionError(
            f"{text!r} names {', '.join(unknown)}, which {'is' if len(unknown) == 1 else 'are'} "
            f"not a tunable parameter (known: {', '.join(param_names)})"
        )
    return tree, sorted(names)


# The same functions for one configuration at a time (grid_div, smem_args expressions).
_SCALAR_FUNCTIONS = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round}


@functools.lru_cache(maxsize=64)
def _compiled(text: str, names: tuple[str, ...]) -> CodeType:
    return compile(parse_checked(text, list(names))[0], f"<expression {text!r}>", "eval")


def evaluate(text: str, config: Mapping[str, Any]) -> Any:
    """The value of an expression in this language for one configuration, parsed once per
    text; RestrictionError when it names something that is not a parameter."""
    code = _compiled(text, tuple(config))
    return eval(code, {"__builtins__": {}, **_SCALAR_FUNCTIONS}, dict(config))


class Restriction:
    """One parsed restriction string, evaluated on columns of parameter values."""

    def __init__(self, text: str, param_names: list[str]):
        self.text = text
        tree, self.names = parse_checked(text, param_names)
        tree = ast.fix_missing_locations(_Vectorise().visit(tree))
        self._code = compile(tree, f"<restriction {text!r}>", "eval")

    def evaluate(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """Boolean mask over the rows of ``columns`` (name -> equal-length arrays)."""
        n = len(next(iter(columns.values()))) if columns else 0
        env = dict(_RUNTIME)
        env.update({name: columns[name] for name in self.names})
        with np.errstate(all="ignore"):
            value = eval(self._code, {"__builtins__": {}}, env)
        return np.broadcast_to(np.asarray(value, dtype=bool), (n,))
