"""mpitune: batch auto-tuning of GPU (and C) kernels over MPI ranks.

Importing the package touches neither MPI nor a GPU. The scheduling layer imports mpi4py
when a run starts. Only the CuPy backend imports CuPy. For the same reason the Python API is
imported on first use. It lives in mpitune/api/: ``mpitune.tune_kernel``, ``mpitune.run_kernel``,
and Kernel Tuner's integration calls. Those are ``mpitune.store_results``, ``mpitune.TuneResults``
and ``mpitune.create_device_targets``.
"""

import importlib
from typing import Any

__version__ = "0.3.0"
__all__ = ["TuneResults", "__version__", "create_device_targets", "run_kernel", "store_results", "tune_kernel"]

_API = ("TuneResults", "create_device_targets", "run_kernel", "store_results", "tune_kernel")


def __getattr__(name: str) -> Any:
    if name in _API:
        # By name: the checked layers (pyproject's mypy files) stop here rather than follow the
        # API into the scheduling layer; ``mypy mpitune/api`` checks the API itself.
        return getattr(importlib.import_module("mpitune.api"), name)
    raise AttributeError(f"module 'mpitune' has no attribute {name!r}")
