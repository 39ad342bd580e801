"""Observers a spec can list in ``observers = [...]``; they describe what to record beyond time.

Importing this package needs no driver and no pynvml: the observer is only a description,
and the modules that talk to NVML import it when a backend opens a device.
"""

from mpitune.observers.nvml import NVMLObserver

__all__ = ["NVMLObserver"]
