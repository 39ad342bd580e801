"""Restriction strings, checked once and evaluated on whole columns of the search space.

Kernel Tuner evaluates every restriction string with ``eval`` per configuration. That is what
makes large spaces slow to build. Here a string is parsed once. Its names are checked against
the tunable parameters. It is rewritten so that ``and``/``or``/``not`` and chained comparisons
work element-wise on numpy arrays. So one call filters a million configurations.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
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


def _power(base: Any, exponent: Any) -> Any:
    """``base ** exponent`` on columns, as Python (Kernel Tuner's ``eval``) has it.

    An integer to a negative power is a float, not numpy's ValueError. 0 to a negative power is
    a ZeroDivisionError. An integer power past 64 bits is an OverflowError. Python would compute
    it, for hours for ``x**(10**10)``. numpy would wrap it around."""
    if not isinstance(base, np.ndarray) and not isinstance(exponent, np.ndarray):
        return base**exponent  # constants: Python's numbers
    base, exponent = np.asarray(base), np.asarray(exponent)
    if base.dtype.kind not in "iu" or exponent.dtype.kind not in "iu":
        return np.power(base, exponent)
    negative = exponent < 0
    if (negative & (base == 0)).any():
        raise ZeroDivisionError("0 cannot be raised to a negative power")
    real = np.power(base.astype(np.float64), exponent)
    if negative.any():
        return real
    if (np.abs(real) >= 2.0**63).any():  # numpy's integers would wrap around to a wrong answer
        raise OverflowError("an integer power past 64 bits")
    return np.power(base, exponent)


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
    "_power": _power,
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


# Arithmetic on constants alone is Python's, on integers of any size, and one such operation
# holds the GIL until it ends: ``3**(10**10)`` would hold the process for hours, to be ended by
# the load deadline at best. A result past this many bits is refused as the spec loads.
MAX_CONSTANT_BITS = 1 << 16
_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}


class RestrictionError(ValueError):
    """A restriction string that cannot be used.

    It does not parse, uses names that are not parameters, would cost too much to evaluate, or
    fails on some values."""


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

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        return _call("_power", node.left, node.right) if isinstance(node.op, ast.Pow) else node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        assert isinstance(node.func, ast.Name)  # parse_checked admits calls of plain names only
        node.func = ast.Name(id=_FUNCTIONS[node.func.id], ctx=ast.Load())
        return node


def parse_checked(text: str, param_names: list[str]) -> tuple[ast.Expression, list[str]]:
    """Parse an expression over tunable parameters, refusing anything else.

    Refused are attributes, subscripts, lambdas, unknown names, and calls other than a few
    numeric functions. grid_div expressions are parsed here too, so both accept the same
    language."""
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
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            _constant(node, text)
    return tree, sorted(names)


def _constant(node: ast.expr, text: str) -> Any:
    """The value of ``node`` when it is arithmetic on constants alone.

    It is computed only when its cost is bounded; otherwise RestrictionError. None when it names
    a parameter, calls a function, or fails. The evaluation then says how."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        operand = _constant(node.operand, text)
        return None if operand is None else _computed(_UNARY[type(node.op)], operand)
    if not isinstance(node, ast.BinOp):
        return None
    left, right = _constant(node.left, text), _constant(node.right, text)
    if left is None or right is None:
        return None
    size, unit = _result_size(node.op, left, right)
    if size > MAX_CONSTANT_BITS:
        amount = f"about {size:.3g}" if math.isfinite(size) else "more than 1e300"
        raise RestrictionError(
            f"{text!r} computes {ast.unparse(node)}, {amount} {unit} long, which would take too long to evaluate"
        )
    return _computed(_OPERATORS[type(node.op)], left, right)


def _computed(op: Any, *operands: Any) -> Any:
    try:
        return op(*operands)
    except (ArithmeticError, TypeError, ValueError):
        return None


def _result_size(op: ast.operator, left: Any, right: Any) -> tuple[float, str]:
    """About how large ``left op right`` is, and in what, before it is computed.

    Only powers, shifts and repeated strings grow much past their operands."""
    if isinstance(op, ast.Mult):
        text, times = (left, right) if isinstance(left, str) else (right, left)
        return (
            float(len(text)) * _size(times) if isinstance(text, str) and isinstance(times, int) else 0.0
        ), "characters"
    if not (isinstance(left, int) and isinstance(right, int)) or right <= 0:
        return 0.0, "bits"
    if isinstance(op, ast.Pow):
        return (_size(right) * math.log2(abs(left)) if abs(left) > 1 else 0.0), "bits"
    return (left.bit_length() + _size(right) if isinstance(op, ast.LShift) else 0.0), "bits"


def _size(n: int) -> float:
    return float(n) if n.bit_length() < 1000 else math.inf


# The same functions for one configuration at a time (grid_div, smem_args expressions).
_SCALAR_FUNCTIONS = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round}


@functools.lru_cache(maxsize=64)
def _compiled(text: str, names: tuple[str, ...]) -> CodeType:
    return compile(parse_checked(text, list(names))[0], f"<expression {text!r}>", "eval")


def evaluate(text: str, config: Mapping[str, Any]) -> Any:
    """The value of an expression in this language for one configuration.

    Each text is parsed once. RestrictionError when it names something that is not a parameter."""
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
        try:
            return self._mask(columns, n)
        except Exception as exc:  # legal, yet it fails on some values: x**-1, "a" < 1
            raise RestrictionError(self._failure(columns, n, exc)) from None

    def _mask(self, columns: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        env = dict(_RUNTIME)
        env.update({name: columns[name] for name in self.names})
        with np.errstate(all="ignore"):
            value = eval(self._code, {"__builtins__": {}}, env)
        return np.broadcast_to(np.asarray(value, dtype=bool), (n,))

    def _failure(self, columns: Mapping[str, np.ndarray], n: int, exc: Exception) -> str:
        """What failed, and on which values.

        The rows are halved down to the first one that fails. That costs a few evaluations
        more, on the error's way only."""
        lo, hi = 0, n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            halves = [(lo, mid), (mid, hi)]
            failing = [h for h in halves if self._fails({k: v[h[0] : h[1]] for k, v in columns.items()}, h[1] - h[0])]
            if not failing:
                break  # only the rows together fail
            lo, hi = failing[0]
        values = {name: columns[name][lo : lo + 1].tolist()[0] for name in self.names} if hi - lo == 1 else None
        where = f" on {values}" if values else ""
        return " ".join(f"{self.text!r} failed{where}: {type(exc).__name__}: {exc}".splitlines())

    def _fails(self, columns: Mapping[str, np.ndarray], n: int) -> bool:
        try:
            self._mask(columns, n)
        except Exception:
            return True
        return False
