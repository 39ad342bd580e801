"""Kernel Tuner's Python interface over mpitune: ``tune_kernel`` for scripts and notebooks,
``run_kernel`` for a kernel's unit tests (docs/python-api.md)."""

from mpitune.api.run import run_kernel
from mpitune.api.tune import tune_kernel

__all__ = ["run_kernel", "tune_kernel"]
