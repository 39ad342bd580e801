"""Whether a problem fits the backend its ``lang`` names.

It is judged from the backend's declared capabilities (mpitune/backends/capabilities.py). So each
refusal names the spec's field at fault, and no backend has to check user input."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import numpy as np

from mpitune import backends
from mpitune.backends.capabilities import Capabilities
from mpitune.model.problem import Kernel
from mpitune.model.restrictions import RestrictionError, parse_checked

Fail = Callable[[str, str], NoReturn]


def language(text: Any, fail: Fail) -> Capabilities:
    """The backend a spec's ``lang`` names."""
    caps = backends.resolve(text) if isinstance(text, str) else None
    if caps is None:
        fail("lang", f"must be one of {', '.join(backends.selectable())}, got {text!r}")
    return caps


def kernel_name_fits(name: str, caps: Capabilities, fail: Fail) -> None:
    if not caps.kernel_name.match(name):
        fail("kernel_name", f"{name!r} is not {caps.kernel_name_rule}")


def memory(spec: Mapping[str, Any], caps: Capabilities, fail: Fail) -> None:
    """Device memory fields (``smem_args``, ``cmem_args``) only for a backend that has that memory."""
    for name in ("smem_args", "cmem_args"):
        if spec.get(name) is not None and name not in caps.memory_kinds:
            fail(name, f"is device memory that lang={caps.lang!r} does not have (use lang={_langs_with_memory(name)})")


def observers(observers: Any, tune_params: Mapping[str, list], caps: Capabilities, fail: Fail) -> list[Any]:
    """The spec's observers, and the tunable parameters that set the device, not the kernel.
    Both are allowed only where the backend runs them."""
    settable = {name for c in backends.all_capabilities() for name in c.device_tunables}
    tunes_device = [name for name in tune_params if name in settable and name not in caps.device_tunables]
    if tunes_device:
        fail(
            "tune_params",
            f"{', '.join(tunes_device)} set the device, which lang={caps.lang!r} cannot "
            f"(use lang={_langs_with(lambda c: bool(c.device_tunables))})",
        )
    if observers is None:
        return []
    if observers and not caps.observers:
        fail(
            "observers",
            f"lang={caps.lang!r} runs no observers; power, energy and clocks need "
            f"lang={_langs_with(lambda c: bool(c.observers))}",
        )
    kinds = " or ".join(caps.observers)
    if not isinstance(observers, (list, tuple)) or not all(type(o).__name__ in caps.observers for o in observers):
        fail("observers", f"must be a list holding one {kinds} (from mpitune.observers import {kinds})")
    if len(observers) != 1:
        fail("observers", f"takes one {kinds}, got {len(observers)}")
    return list(observers)


def problem(problem: Kernel, caps: Capabilities, fail: Fail) -> None:
    """What depends on the backend once the problem is assembled. That is the argument types,
    the answers and the launch geometry."""
    for i, arg in enumerate(problem.arguments):
        dtype = np.asarray(arg).dtype
        if not isinstance(arg, np.ndarray) and caps.scalar_dtypes is not None and dtype.str not in caps.scalar_dtypes:
            fail("arguments", f"argument {i}: lang={caps.lang!r} cannot pass a {dtype} scalar by value")
        if (dtype.kind == "f" and dtype.itemsize > caps.max_float_bytes) or (
            dtype.kind == "c" and dtype.itemsize > caps.max_complex_bytes
        ):
            fail("arguments", f"argument {i}: lang={caps.lang!r} has no {dtype} type")
    if not caps.complex_answers:
        for i, expected in enumerate(problem.answer or []):
            if expected is not None and np.asarray(expected).dtype.kind == "c":
                fail(
                    "answer",
                    f"entry {i} is complex; the check on the device compares real values only, "
                    f"so leave it None or compare real and imaginary parts as separate outputs",
                )
    if caps.launch_geometry:
        _geometry(problem, fail)


def _geometry(problem: Kernel, fail: Fail) -> None:
    for name in problem.block_size_names:
        for value in problem.tune_params.get(name, []):
            if isinstance(value, (str, float)) or int(value) < 1:
                fail(
                    "tune_params",
                    f"block size parameter {name!r} has value {value!r}; block sizes must be positive integers",
                )
    names = list(problem.tune_params)
    for axis in "xyz":
        div = problem.grid_div.get(axis)
        for entry in [div] if isinstance(div, str) else div or []:
            try:
                parse_checked(entry, names)
            except (RestrictionError, ValueError) as exc:
                fail(f"grid_div_{axis}", str(exc))


def _langs_with_memory(kind: str) -> str:
    return _langs_with(lambda c: kind in c.memory_kinds)


def _langs_with(has: Callable[[Capabilities], bool]) -> str:
    return " or ".join(repr(c.lang) for c in backends.all_capabilities() if c.selectable and has(c))
