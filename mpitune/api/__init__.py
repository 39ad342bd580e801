"""Kernel Tuner's Python interface over mpitune: ``tune_kernel`` for scripts and notebooks,
``run_kernel`` for a kernel's unit tests, and the integration calls on Kernel Tuner's results
file, ``store_results``, ``TuneResults`` and ``create_device_targets`` (docs/python-api.md)."""

from mpitune.api.run import run_kernel
from mpitune.api.tune import tune_kernel
from mpitune.offline.integration import TuneResults, create_device_targets, store_results

__all__ = ["TuneResults", "create_device_targets", "run_kernel", "store_results", "tune_kernel"]
