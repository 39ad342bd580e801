"""Whether a GPU held its clocks while a configuration was timed, from NVML.

A GPU throttles when too hot, at its power cap, or slowed down by the board. It then runs
every kernel slower for a while. So a configuration timed then is measured slower than it is.
Among configurations a few percent apart, that is enough to lose the best. NVML says so in two
ways. The clock event reasons in force now hold a bit per cause. Per policy (power, thermal), a
counter holds the nanoseconds the clocks were held down. The backend reads both around a
configuration's timed launches. A reason in force at the end, or a counter that moved, means
the launches were throttled. The backend then times the configuration once more.

Opening the watch needs pynvml and a driver. Without them the backend times without it, as
before. Reasons that are not a slowdown are left out: the GPU idle, application clocks as set,
sync boost, the display.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from mpitune.errors import UserError
from mpitune.observers.nvml_device import NVMLDevice

log = logging.getLogger(__name__)

# NVML's clock event reasons (nvmlClocksEventReason*) that slow a kernel down, by cause.
REASON_BITS = {
    "power": 0x4 | 0x80,  # software power cap, hardware power brake
    "slowdown": 0x8,  # hardware slowdown (the board: power supply, temperature of other parts)
    "thermal": 0x20 | 0x40,  # software and hardware thermal slowdown
}
# NVML's performance policies whose violation counters say the clocks were held down meanwhile.
POLICIES = {"power": 0, "thermal": 1}  # NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL


def reasons_of(bits: int) -> frozenset[str]:
    """The causes of slowing down that NVML's reason ``bits`` name."""
    return frozenset(cause for cause, mask in REASON_BITS.items() if bits & mask)


@dataclass(frozen=True)
class Window:
    """The violation counters (ns) when a configuration's timed launches began."""

    violation_ns: dict[str, int]


class ThrottleWatch:
    """One GPU's throttling around each configuration's timed launches."""

    def __init__(self, device: NVMLDevice):
        self.device = device
        nvml = device.nvml
        # The newer name; drivers' older pynvml has only the one it deprecates.
        newer = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = newer or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        self._policies = {cause: p for cause, p in POLICIES.items() if self._violation(p) is not None}

    @classmethod
    def open(cls, pci_bus_id: str) -> ThrottleWatch | None:
        """The watch of the GPU at ``pci_bus_id``.

        None where NVML cannot say; that is said once, in the debug log."""
        try:
            return cls(NVMLDevice(pci_bus_id))
        except (UserError, AttributeError) as exc:
            log.debug("no throttle watch on GPU %s: %s", pci_bus_id, exc)
            return None

    def _violation(self, policy: int) -> int | None:
        nvml: Any = self.device.nvml
        try:
            return int(nvml.nvmlDeviceGetViolationStatus(self.device.handle, policy).violationTime)
        except nvml.NVMLError:
            return None

    def start(self) -> Window:
        return Window({cause: self._violation(p) or 0 for cause, p in self._policies.items()})

    def stop(self, window: Window) -> frozenset[str]:
        """Why the clocks were held down since ``start``; empty when they were not."""
        nvml: Any = self.device.nvml
        try:
            now = reasons_of(int(self._reasons(self.device.handle)))
        except nvml.NVMLError:
            now = frozenset()
        held = {
            cause
            for cause, p in self._policies.items()
            if (self._violation(p) or 0) > window.violation_ns.get(cause, 0)
        }
        return now | held

    def close(self) -> None:
        self.device.close()
