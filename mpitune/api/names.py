"""The arguments of ``tune_kernel`` and ``run_kernel`` as the names of a spec.

So the spec loader's checks (mpitune/spec/load.py) are the only checks, whichever way a problem
comes in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mpitune.errors import SpecError

# Kernel Tuner's ``run_kernel`` keywords: its launch and compile settings, nothing of a search.
RUN_KERNEL_KEYWORDS = (
    "grid_div_x",
    "grid_div_y",
    "grid_div_z",
    "lang",
    "device",
    "platform",
    "smem_args",
    "cmem_args",
    "texmem_args",
    "compiler",
    "compiler_options",
    "defines",
    "block_size_names",
    "quiet",
    "log",
)


def spec_names(
    kernel_name: Any,
    kernel_source: Any,
    problem_size: Any,
    arguments: Any,
    tune_params: Any,
    keywords: Mapping[str, Any],
) -> dict[str, Any]:
    """The positional arguments by their spec names, then the keywords as given."""
    return {
        "kernel_name": kernel_name,
        "kernel_source": kernel_source,
        "problem_size": problem_size,
        "arguments": arguments,
        "tune_params": tune_params,
        **keywords,
    }


def one_configuration(origin: str, params: Any, keywords: Mapping[str, Any]) -> dict[str, list[Any]]:
    """``run_kernel``'s ``params`` as ``tune_params``: a space of one configuration.

    Each parameter has its one value. The keywords are checked to be ``run_kernel``'s.
    """
    for name in keywords:
        if name not in RUN_KERNEL_KEYWORDS:
            raise SpecError(
                origin, name, "unknown keyword argument of run_kernel; it takes " + ", ".join(RUN_KERNEL_KEYWORDS)
            )
    if not isinstance(params, Mapping):
        raise SpecError(origin, "params", "must be a dict of parameter name -> its one value")
    return {k: [v] for k, v in params.items()}


def callable_in(value: Any, where: str) -> str | None:
    """Where the first callable in ``value`` is, as an expression: ``metrics['GFLOP/s']``.

    ``value`` is a keyword's value: dicts, lists and tuples of plain values. None if it holds no
    callable.
    """
    if callable(value):
        return where
    if isinstance(value, Mapping):
        items: Any = ((f"{where}[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((found for found in (callable_in(v, w) for w, v in items) if found), None)


def refuse_callables(names: Mapping[str, Any], origin: str) -> None:
    """Refuses functions, which cannot reach the ranks of a job started for ``ranks`` > 1.

    A lambda or a local function does not pickle. One of the calling script pickles as a
    reference to a module the job's ranks do not have. Strings do the same work and travel.
    """
    for name, value in names.items():
        found = callable_in(value, name)
        if found:
            raise SpecError(
                origin,
                name,
                f"{found} is a function, which cannot be sent to the ranks of an MPI job; "
                "with ranks > 1 write it as an expression string (restrictions, metrics, "
                "defines and smem_args take them), or tune with ranks=1",
            )
