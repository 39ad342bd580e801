"""The checks of one spec field each, whatever the backend. They say what a kernel, its
parameters, its arguments and its launch must be before anything is compiled. Checks that depend
on the backend are in fit.py."""

from __future__ import annotations

import functools
import inspect
import numbers
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mpitune.errors import not_a_file
from mpitune.model import searchspace
from mpitune.model.kernel_extras import KernelExtras
from mpitune.model.kernel_extras import parse as parse_extras
from mpitune.model.problem import plain
from mpitune.model.restrictions import Restriction, RestrictionError
from mpitune.model.schema import MAX_NAME, RESERVED, comma_clash, outside_int64, unkept_in_floats, unkept_text
from mpitune.spec.checker import Checker

BLOCK_SIZE_NAMES = ["block_size_x", "block_size_y", "block_size_z"]  # Kernel Tuner's default


def kernel_name(check: Checker, name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        check.fail("kernel_name", "is required and must be a non-empty string")
    return name


def kernel_source(check: Checker, source: Any, spec_dir: str) -> str:
    """The source text itself, or the name of a file beside the spec (as in Kernel Tuner)."""
    if isinstance(source, Path):
        source = str(source)
    if not isinstance(source, str) or not source.strip():
        check.fail("kernel_source", "is required: the kernel's source text or the path of a file holding it")
    if "\n" in source or "(" in source:
        return source
    file = os.path.join(spec_dir, source)
    if not os.path.isfile(file):
        check.fail("kernel_source", f"file {source!r} {not_a_file(file) or 'not found'} (looked in {spec_dir})")
    with open(file, encoding="utf-8") as fh:
        return fh.read()


def tune_params(check: Checker, params: Any) -> dict[str, list]:
    if not isinstance(params, dict) or not params:
        check.fail("tune_params", "is required: a dict of parameter name -> list of values")
    result = {}
    for name, values in params.items():
        if not isinstance(name, str) or not name.isidentifier():
            check.fail("tune_params", f"parameter name {name!r} is not an identifier")
        if len(name) > MAX_NAME:
            check.fail("tune_params", f"parameter name {name[:40]!r}... is longer than {MAX_NAME} characters")
        if name in RESERVED:
            check.fail(
                "tune_params", f"parameter name {name!r} is reserved for a result field (ours or Kernel Tuner's)"
            )
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range, np.ndarray)):
            check.fail("tune_params", f"{name!r} must be a list of values, got {type(values).__name__}")
        values = [plain(v) for v in values]
        if not values:
            check.fail("tune_params", f"{name!r} has an empty list of values")
        for v in values:
            if not isinstance(v, (int, float, str)) or (isinstance(v, float) and not np.isfinite(v)):
                check.fail("tune_params", f"{name!r} has value {v!r}; values must be finite numbers or strings")
            if type(v) not in (bool, int, float, str):  # an IntEnum prints, so is keyed, as another value
                check.fail("tune_params", f"{name!r} has value {v!r} of type {type(v).__name__}; use int, float or str")
            # outside int64: it would be measured, then fail the write, on every rerun
            unkept = outside_int64(v) or unkept_text(v)
            if unkept:
                check.fail("tune_params", f"{name!r} has {unkept}")
        kinds = {str if isinstance(v, str) else float if isinstance(v, float) else int for v in values}
        if str in kinds and len(kinds) > 1:
            check.fail("tune_params", f"{name!r} mixes strings and numbers")
        lost = unkept_in_floats(values)
        if lost:
            check.fail("tune_params", f"{name!r} has {lost}")
        if len(set(values)) != len(values):
            dup = next(v for v in values if values.count(v) > 1)
            check.fail("tune_params", f"{name!r} lists the value {dup!r} more than once")
        result[name] = values
    clash = comma_clash(result)
    if clash:
        check.fail("tune_params", clash)
    too_large = searchspace.too_large([len(v) for v in result.values()])
    if too_large:
        check.fail("tune_params", too_large)
    return result


def arguments(check: Checker, args: Any) -> list[Any]:
    """Numpy arrays and numpy scalars only, so that every argument's C type is unambiguous."""
    if not isinstance(args, (list, tuple)) or not args:
        check.fail("arguments", "is required: a list of numpy arrays and numpy scalars")
    for i, arg in enumerate(args):
        if isinstance(arg, np.ndarray):
            if arg.dtype.hasobject or arg.dtype.kind not in "biufc":
                check.fail("arguments", f"argument {i} has dtype {arg.dtype}; use a numeric dtype")
        elif not isinstance(arg, np.generic) or arg.dtype.kind not in "biufc":
            check.fail(
                "arguments",
                f"argument {i} is a {type(arg).__name__}; use a numpy array or a numpy "
                f"scalar such as np.int32({arg!r}) so its C type is unambiguous",
            )
    return [np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in args]


def answer(check: Checker, expected_outputs: Any, args: list[Any]) -> list[Any] | None:
    """The expected outputs, one entry per argument; None when nothing is checked."""
    if expected_outputs is None:
        return None
    if not isinstance(expected_outputs, (list, tuple)):
        check.fail("answer", "must be a list like arguments, with None where nothing is checked")
    if len(expected_outputs) != len(args):
        check.fail("answer", f"has {len(expected_outputs)} entries but arguments has {len(args)}")
    for i, (expected, arg) in enumerate(zip(expected_outputs, args)):
        if expected is None:
            continue
        if not isinstance(arg, np.ndarray):
            check.fail("answer", f"entry {i} checks a scalar argument; only arrays can be outputs")
        expected = np.asarray(expected)
        if expected.shape != arg.shape:
            check.fail("answer", f"entry {i} has shape {expected.shape} but argument {i} has {arg.shape}")
        # Outputs are checked by subtraction: real numbers (integers, floats) compare with
        # each other and complex with complex; booleans, strings and objects do not compare.
        kinds = {expected.dtype.kind, arg.dtype.kind}
        if not (kinds <= set("iuf") or kinds == {"c"}):
            check.fail(
                "answer",
                f"entry {i} has dtype {expected.dtype} but argument {i} has {arg.dtype}; "
                "both must be real numbers (integer or float) or both complex",
            )
    if all(a is None for a in expected_outputs):
        return None
    return [None if a is None else np.ascontiguousarray(a) for a in expected_outputs]


def restrictions(check: Checker, given: Any, names: list[str]) -> list[Restriction | Callable]:
    if given is None:
        return []
    if isinstance(given, str) or callable(given):
        given = [given]
    if not isinstance(given, (list, tuple)):
        check.fail("restrictions", "must be a string, a callable, or a list of them")
    parsed: list[Restriction | Callable] = []
    for r in given:
        if isinstance(r, str):
            try:
                parsed.append(Restriction(r, names))
            except RestrictionError as exc:
                check.fail("restrictions", str(exc))
        elif callable(r):
            parsed.append(_guarded(check, r))
        else:
            check.fail("restrictions", f"{r!r} is neither a string nor a callable")
    return parsed


def _guarded(check: Checker, fn: Callable) -> Callable[[dict], bool]:
    """A callable restriction whose failure (a misspelled parameter, a bug) is the spec's.
    ``functools.wraps`` keeps its source text, which is part of the problem's identity."""
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", "a callable") + (f" (line {code.co_firstlineno})" if code else "")
    try:
        signature = inspect.signature(fn)
        signature.bind({})
    except TypeError:  # Kernel Tuner 1.5 calls callables in a list with the values as arguments
        check.fail(
            "restrictions",
            f"{name} takes {signature}, but a callable restriction gets one argument, the "
            "configuration as a dict: write it as lambda p: ... with p['NAME']",
        )
    except ValueError:  # no signature to read (a builtin): its call says what is wrong
        pass

    @functools.wraps(fn)
    def restriction(config: dict) -> bool:
        try:
            return bool(fn(config))
        except Exception as exc:
            check.fail("restrictions", f"{name} failed on {config}: {type(exc).__name__}: {exc}")

    return restriction


def problem_size(check: Checker, size: Any) -> tuple[int, ...]:
    if size is None:
        size = (1,)
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (size,)
    if not isinstance(size, (list, tuple)) or not 1 <= len(size) <= 3:
        check.fail("problem_size", f"must be an integer or a list of 1 to 3 integers, got {size!r}")
    return tuple(check.int_("problem_size", int(v) if isinstance(v, np.integer) else v, 1) for v in size)


def block_size_names(check: Checker, names: Any) -> list[str]:
    names = check.str_list("block_size_names", BLOCK_SIZE_NAMES if names is None else names)
    if not 1 <= len(names) <= 3:
        check.fail("block_size_names", "must name 1 to 3 parameters")
    return names


def grid_div(check: Checker, spec: Mapping[str, Any], params: Mapping[str, list]) -> dict[str, Any]:
    """``grid_div_x`` ... ``grid_div_z``: an expression string, or a list of the parameters
    the problem size is divided by."""
    divisors: dict[str, Any] = {}
    for axis in "xyz":
        field = f"grid_div_{axis}"
        value = spec[field]
        if value is not None and not isinstance(value, str):
            value = check.str_list(field, value)
            for name in value:
                if name not in params:
                    check.fail(field, f"{name!r} is not a tunable parameter")
        divisors[axis] = value
    return divisors


def extras(check: Checker, spec: Mapping[str, Any], params: Mapping[str, list]) -> KernelExtras | None:
    """``defines``, ``smem_args`` and ``cmem_args``, tried on the first value of every parameter."""
    first = {name: values[0] for name, values in params.items()}
    return parse_extras(spec["defines"], spec["smem_args"], spec["cmem_args"], first, check.fail)
