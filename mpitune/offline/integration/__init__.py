"""Kernel Tuner's integration (``kernel_tuner.integration``, 1.5.0): its results file of the best
configurations per device and problem size (results_file.py), the configurations it names
(choice.py), the header of device targets (header.py), its three calls with their signatures
(calls.py), and mpitune files as both (from_files.py, for ``export``)."""

from mpitune.offline.integration.calls import TuneResults, create_device_targets, store_results
from mpitune.offline.integration.results_file import ResultsFileError

__all__ = ["ResultsFileError", "TuneResults", "create_device_targets", "store_results"]
