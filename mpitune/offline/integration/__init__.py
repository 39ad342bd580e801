"""Kernel Tuner's integration (``kernel_tuner.integration``, 1.5.0).

Its results file holds the best configurations per device and problem size (results_file.py).
choice.py says which configurations the file names. header.py writes the header of device
targets. calls.py has its three calls with their signatures. from_files.py writes mpitune files
as both, for ``export``."""

from mpitune.offline.integration.calls import TuneResults, create_device_targets, store_results
from mpitune.offline.integration.results_file import ResultsFileError

__all__ = ["ResultsFileError", "TuneResults", "create_device_targets", "store_results"]
