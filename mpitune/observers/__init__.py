"""Observers a spec can list in ``observers = [...]``: what to record beyond time.

Importing this package needs no driver and no pynvml. The observer is only a description.
The modules that talk to NVML import pynvml when a backend opens a device.
"""

from mpitune.observers.nvml import NVMLObserver

__all__ = ["NVMLObserver"]
