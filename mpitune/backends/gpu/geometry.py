"""How a configuration is launched, and the source a GPU compiler is given for it.

Block and grid follow Kernel Tuner's conventions. The source gets its ``#define`` lines, the
kernel's name its template arguments. Pure functions: compile workers use them without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.model.kernel_extras import substitute
from mpitune.model.restrictions import evaluate
from mpitune.model.work import Work

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


def kernel_code(
    source: str,
    config: Mapping[str, Any],
    block: Sequence[int],
    grid: Sequence[int],
    defines: Mapping[str, str] | None = None,
) -> str:
    """The source after its ``#define`` lines.

    By default there is one per parameter, and for block_size_x/y/z and grid_size_x/y/z. There
    is also ``kernel_tuner``, which kernels written for Kernel Tuner test. With the spec's
    ``defines``, exactly those, as in Kernel Tuner. ``#line 1`` keeps the compiler's line
    numbers those of the user's file.
    """
    if defines is None:
        lines = {k: _define_value(v) for k, v in config.items()}
        for axis, b, g in zip(AXES, block, grid):
            lines.setdefault(f"block_size_{axis}", str(b))
            lines.setdefault(f"grid_size_{axis}", str(g))
        lines.setdefault("kernel_tuner", "1")
        defines = lines
    return "\n".join(f"#define {k} {v}" for k, v in defines.items()) + "\n#line 1\n" + source


def template_name(kernel_name: str, config: Mapping[str, Any]) -> str:
    """``name<float, tile_x>`` with the parameters in its template arguments replaced by
    their values (``name<float, 4>``): the instance NVRTC is asked for."""
    base, bracket, args = kernel_name.partition("<")
    return base + bracket + substitute(args, config) if bracket else kernel_name


@dataclass(frozen=True)
class Geometry:
    """A problem's launch rules: its size, ``grid_div`` and block size names."""

    problem_size: tuple[int, ...]
    grid_div: Mapping[str, Any]
    block_size_names: tuple[str, ...]

    def dims(self, config: Mapping[str, Any]) -> tuple[Dims, Dims]:
        """(grid, block) of ``config``; raises where a divisor is not positive."""
        block = block_dims(config, self.block_size_names)
        return grid_dims(self.problem_size, config, self.grid_div, self.block_size_names), block


def configured(source: str, kernel_name: str, work: Work, geometry: Geometry) -> tuple[str, str] | str:
    """(the source after its defines, the kernel's name expression) of one configuration.

    A string alone says why its launch geometry cannot be computed.
    """
    config, derived = work.config, work.derived
    try:
        grid, block = geometry.dims(config)
    except (ValueError, ArithmeticError, KeyError, TypeError) as exc:
        return f"cannot compute the launch geometry: {exc}"
    code = kernel_code(source, config, block, grid, derived.defines if derived else None)
    return code, template_name(kernel_name, config)
