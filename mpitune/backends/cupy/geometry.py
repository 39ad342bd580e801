"""How a configuration is launched and what NVRTC is given for it: block and grid dimensions
with Kernel Tuner's conventions, the source with its ``#define`` lines, the template instance.
Pure functions, so compile workers use them without a GPU and tests check them anywhere."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mpitune.errors import UserError, environment_number
from mpitune.model.kernel_extras import substitute
from mpitune.model.restrictions import evaluate

AXES = "xyz"

Dims = tuple[int, int, int]


def block_dims(config: Mapping[str, Any], block_size_names: Sequence[str]) -> Dims:
    """Threads per block: the parameters named in block_size_names, 1 where one is not tuned."""
    x, y, z = ([int(config.get(name, 1)) for name in block_size_names] + [1, 1, 1])[:3]
    return x, y, z


def _divisor(axis: int, grid_div: Any, config: Mapping[str, Any], block_size_names: Sequence[str]) -> Any:
    if grid_div is None:
        # Kernel Tuner's default: divide by this axis' block size when it is tuned.
        return config.get(block_size_names[axis], 1) if axis < len(block_size_names) else 1
    if isinstance(grid_div, str):
        return evaluate(grid_div, config)
    return math.prod(evaluate(entry, config) for entry in grid_div)


def grid_dims(
    problem_size: Sequence[int], config: Mapping[str, Any], grid_div: Mapping[str, Any], block_size_names: Sequence[str]
) -> Dims:
    """Blocks per grid: ceil(problem_size / divisor) per axis, with Kernel Tuner's grid_div rules.

    ``grid_div[axis]`` is None (the axis' block size), a list of parameter names whose
    product divides, or an expression over the parameters.
    """
    dims = []
    for axis, name in enumerate(AXES):
        size = problem_size[axis] if axis < len(problem_size) else 1
        div = _divisor(axis, grid_div.get(name), config, block_size_names)
        if not div > 0:
            raise ValueError(f"grid_div_{name} is {div!r} for this configuration; it must be positive")
        exact = isinstance(div, (int, np.integer)) and not isinstance(div, bool)
        dims.append(-(-int(size) // int(div)) if exact else math.ceil(size / div))
    x, y, z = dims
    return x, y, z


def _define_value(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    return str(value)


def kernel_defines(
    config: Mapping[str, Any],
    block: Sequence[int],
    grid: Sequence[int],
    defines: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A configuration's ``#define`` lines, name to value: by default one per parameter, for
    block_size_x/y/z and grid_size_x/y/z, and ``kernel_tuner`` (kernels written for Kernel
    Tuner test it); with the spec's ``defines``, exactly those, as in Kernel Tuner."""
    if defines is not None:
        return dict(defines)
    lines = {k: _define_value(v) for k, v in config.items()}
    for axis, b, g in zip(AXES, block, grid):
        lines.setdefault(f"block_size_{axis}", str(b))
        lines.setdefault(f"grid_size_{axis}", str(g))
    lines.setdefault("kernel_tuner", "1")
    return lines


def kernel_code(source: str, defines: Mapping[str, str]) -> str:
    """The source after its ``#define`` lines (``kernel_defines``); ``#line 1`` keeps NVRTC's
    line numbers those of the user's file."""
    return "\n".join(f"#define {k} {v}" for k, v in defines.items()) + "\n#line 1\n" + source


# At most this many configurations share one NVRTC program (compiling.py, ``NvrtcCompiler.many``).
# NVRTC costs about 0.15 s a program besides the code itself: 24 configurations of the matrix
# multiply example, each compiled cold on an H200's host, took 0.32 s each alone, 0.17 s in
# programs of 4, 0.19 s of 8 and 0.18 s of 24 (benchmarks/compile_anatomy.py, ``grouped_K``).
GROUP_VARIABLE = "MPITUNE_COMPILE_GROUP"  # configurations per program at most; 1: one each
DEFAULT_GROUP = 4


def group_max(environ: Mapping[str, str] | None = None) -> int:
    """What ``MPITUNE_COMPILE_GROUP`` allows (``DEFAULT_GROUP`` when unset); a value that is no
    whole number of 1 or more is refused in one line (``UserError``) before MPI starts."""
    value = environment_number(GROUP_VARIABLE, DEFAULT_GROUP, environ=environ)
    if value != int(value):
        raise UserError(f"environment variable {GROUP_VARIABLE}: {value:g} is not a whole number")
    return int(value)


def groupable(source: str, kernel_name: str, constants: Sequence[str]) -> bool:
    """Whether copies of a kernel can share one program, each in a namespace of its own with its
    own defines: not where the source includes a file (a header's include guard would keep it
    out of every copy but the first, with the first copy's defines), names constant memory that
    the run fills, or the kernel is a template."""
    return "#include" not in source and "#pragma once" not in source and not constants and "<" not in kernel_name


def grouped_code(source: str, kernel_name: str, members: Sequence[Mapping[str, str]]) -> tuple[str, list[str]]:
    """One program of several configurations (their ``kernel_defines``) and the name expression
    of each one's kernel: copy i is wrapped in ``namespace mpitune_i``, its kernel renamed
    ``<name>_mpitune_i`` by a macro (an ``extern "C"`` kernel keeps no namespace), and its
    defines undone after it, so that the next copy sees only its own."""
    parts, names = [], []
    for i, defines in enumerate(members):
        renamed = f"{kernel_name}_mpitune_{i}"
        lines = [f"#define {k} {v}" for k, v in {**defines, kernel_name: renamed}.items()]
        undone = [f"#undef {k}" for k in (*defines, kernel_name)]
        parts.append("\n".join([*lines, f"namespace mpitune_{i} {{", "#line 1", source, "}", *undone]))
        names.append(f"mpitune_{i}::{renamed}")
    return "\n".join(parts) + "\n", names


def template_name(kernel_name: str, config: Mapping[str, Any]) -> str:
    """``name<float, tile_x>`` with the parameters in its template arguments replaced by
    their values (``name<float, 4>``): the instance NVRTC is asked for."""
    base, bracket, args = kernel_name.partition("<")
    return base + bracket + substitute(args, config) if bracket else kernel_name
