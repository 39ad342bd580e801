"""One GPU as NVML sees it, found by PCI bus id; the only place that imports pynvml.

CUDA numbers the GPUs a process can see, after CUDA_VISIBLE_DEVICES and in its own order.
NVML numbers all GPUs of the node. So the same index names different GPUs in the two. The PCI
bus id is the same in both. That is how the backend tells NVML which GPU it measures.

pynvml (the ``nvidia-ml-py`` package) is imported when a device is opened, never at import
time. So specs, checks and the offline verbs need neither the package nor a driver.
"""

from __future__ import annotations

import logging
import re
from types import ModuleType

from mpitune.errors import UserError

log = logging.getLogger(__name__)

_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def unavailable(reason: str) -> UserError:
    """The one line a rank stops with when it cannot use NVML at all."""
    return UserError(f"observers: NVML is not available: {reason} (pip install nvidia-ml-py; needs an NVIDIA driver)")


def nvml_bus_id(pci_bus_id: str) -> str:
    """A PCI bus id in NVML's spelling, ``00000000:19:00.0``.

    CUDA and CuPy write the domain with 4 digits (``0000:19:00.0``), NVML with 8. Some tools
    leave it out. All of them name the same GPU.
    """
    match = _BUS_ID.match(pci_bus_id.strip())
    if not match:
        raise ValueError(f"{pci_bus_id!r} is not a PCI bus id such as 0000:19:00.0")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):08x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}".upper()


def import_pynvml() -> ModuleType:
    """pynvml, or the one-line UserError that says how to get it."""
    try:
        import pynvml
    except ImportError as exc:
        raise unavailable(f"no module pynvml ({exc})") from None
    return pynvml


class NVMLDevice:
    """An NVML session (nvmlInit/nvmlShutdown, reference counted by NVML) and one GPU's handle."""

    def __init__(self, pci_bus_id: str):
        self.nvml = import_pynvml()
        try:
            self.bus_id = nvml_bus_id(pci_bus_id)
        except ValueError as exc:
            raise UserError(f"observers: {exc}") from None
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise unavailable(str(exc)) from None
        try:
            self.handle = self.nvml.nvmlDeviceGetHandleByPciBusId(self.bus_id)
        except self.nvml.NVMLError as exc:
            self.nvml.nvmlShutdown()
            raise UserError(f"observers: NVML has no GPU at PCI bus id {self.bus_id} ({exc})") from None
        log.debug("NVML opened the GPU at PCI %s", self.bus_id)

    def close(self) -> None:
        """End this session.

        NVML stays initialised while other sessions of the process are open."""
        if self.handle is not None:
            self.handle = None
            self.nvml.nvmlShutdown()
