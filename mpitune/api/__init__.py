"""Kernel Tuner's Python interface over mpitune (docs/python-api.md).

``tune_kernel`` serves scripts and notebooks, ``run_kernel`` a kernel's unit tests. The
integration calls work on Kernel Tuner's results file: ``store_results``, ``TuneResults`` and
``create_device_targets``.
"""

from mpitune.api.run import run_kernel
from mpitune.api.tune import tune_kernel
from mpitune.offline.integration import TuneResults, create_device_targets, store_results

__all__ = ["TuneResults", "create_device_targets", "run_kernel", "store_results", "tune_kernel"]
