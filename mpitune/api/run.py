"""``mpitune.run_kernel``: one configuration compiled and run once, its outputs returned, as
Kernel Tuner's ``run_kernel`` does for a kernel's unit tests.

It runs in the calling process, on the backend the problem's ``lang`` names (gcc for ``"C"``,
the GPU through CuPy for ``"cupy"``), without MPI, a search or a results file. A configuration
that fails (it does not compile, the launch is refused, the kernel crashes) raises
``RuntimeError`` with the backend's message, as Kernel Tuner's raises.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mpitune import backends
from mpitune.api.names import one_configuration, spec_names
from mpitune.errors import SpecError
from mpitune.model.timeline import Timeline
from mpitune.model.work import Work
from mpitune.spec.load import load_problem

ORIGIN = "run_kernel"


def run_kernel(
    kernel_name: str,
    kernel_source: str | os.PathLike[str],
    problem_size: int | Sequence[int],
    arguments: Sequence[Any],
    params: dict[str, Any],
    **kwargs: Any,
) -> list[Any]:
    """Compile one configuration of a kernel and run it once, as Kernel Tuner's ``run_kernel`` does.

    The arguments are copied first, so the caller's arrays stay as they were.

    Args:
        kernel_name: the kernel's name in its source.
        kernel_source: the source as text, or a path relative to the current directory.
        problem_size: the problem's size, which sets the grid with the block size.
        arguments: the kernel's arguments: numpy arrays and scalars.
        params: one value per tunable parameter.
        **kwargs: Kernel Tuner's ``run_kernel`` keywords (``lang``, ``grid_div_x``, ``defines``,
            ``compiler_options``, ``smem_args``, ``cmem_args``, ...).

    Returns:
        The arguments as the kernel left them: a list like ``arguments``, numpy arrays for
        arrays, scalars as given.

    Raises:
        SpecError: the problem or a keyword is wrong; the message names the field.
        RuntimeError: the configuration did not compile or run; the message says why.
    """
    tune_params = one_configuration(ORIGIN, params, kwargs)
    names = spec_names(kernel_name, kernel_source, problem_size, arguments, tune_params, kwargs)
    # The run that counts is the untimed first one: timed once, no more.
    kernel = replace(load_problem(names, ORIGIN, os.getcwd(), strict=True).kernel, iterations=1)
    config = {name: values[0] for name, values in kernel.tune_params.items()}
    try:
        derived = kernel.extras.derive(config) if kernel.extras is not None and kernel.extras.varies else None
    except ValueError as exc:
        raise SpecError(ORIGIN, "defines" if str(exc).startswith("defines") else "smem_args", str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="mpitune-run-") as workdir:
        backend = backends.create(kernel, workdir, 0)
        try:
            backend.prepare()
            backend.keep_outputs = True
            result = backend.run(Work(0, config, derived), Timeline())
        finally:
            backend.close()
    if not result.ok or backend.outputs is None:
        raise RuntimeError(f"{kernel_name} with {config}: {result.status}: {result.error}")
    return backend.outputs
