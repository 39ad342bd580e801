"""Samples one GPU's power, clocks and temperature in a background thread around a window.

The backend calls ``start()`` and launches the kernel back to back for the observer's
continuous duration. It then synchronizes and calls ``stop()``, which returns the window's values.

This thread asks every few milliseconds. NVML refreshes its readings far less often. Power is
refreshed every 20 to 100 ms depending on the GPU. Temperature is refreshed about once a second,
the energy counter every few tens of milliseconds. So most samples repeat the previous reading.
``samples`` counts reads, not fresh readings. Windows shorter than about a second say little.
Power is read from NVML's instantaneous power field where the GPU has it. On recent GPUs
(Ampere and later, except GA100) ``nvmlDeviceGetPowerUsage`` averages over the last second. That
would mix the idle time before the window into it.

Energy comes from the GPU's total-energy counter, read at both ends of the window. The counter
holds mJ since the driver loaded. A GPU without one integrates the power samples over time.
"""

from __future__ import annotations

import logging
import threading
import time

from mpitune.errors import UserError
from mpitune.observers.nvml_device import NVMLDevice

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.005


class PowerSampler:
    """Sampling windows on the GPU at ``pci_bus_id``; one window at a time."""

    def __init__(self, pci_bus_id: str, interval_s: float = DEFAULT_INTERVAL_S):
        self.device = NVMLDevice(pci_bus_id)
        self.interval_s = interval_s
        nvml, handle = self.device.nvml, self.device.handle
        self._instant_power = self._has_instant_power()
        self._energy_counter = self._has_energy_counter()
        self._sm_clock = nvml.NVML_CLOCK_SM
        self._mem_clock = nvml.NVML_CLOCK_MEM
        self._sensor = nvml.NVML_TEMPERATURE_GPU
        self._handle = handle
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._rows: list[tuple[float, float, float, float, float]] = []
        self._energy_start_mj: float | None = None
        log.debug(
            "GPU %s: power from %s, energy from %s",
            self.device.bus_id,
            "the instantaneous field" if self._instant_power else "nvmlDeviceGetPowerUsage",
            "the total-energy counter" if self._energy_counter else "integrated power",
        )

    def _has_instant_power(self) -> bool:
        nvml = self.device.nvml
        try:
            field = nvml.nvmlDeviceGetFieldValues(self.device.handle, [nvml.NVML_FI_DEV_POWER_INSTANT])[0]
        except nvml.NVMLError:
            return False
        return field.nvmlReturn == nvml.NVML_SUCCESS and field.value.uiVal > 0

    def _has_energy_counter(self) -> bool:
        nvml = self.device.nvml
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(self.device.handle)
        except nvml.NVMLError:
            return False
        return True

    def _power_mw(self) -> float:
        nvml = self.device.nvml
        if self._instant_power:
            field = nvml.nvmlDeviceGetFieldValues(self._handle, [nvml.NVML_FI_DEV_POWER_INSTANT])[0]
            if field.nvmlReturn == nvml.NVML_SUCCESS:
                return float(field.value.uiVal)
        return float(nvml.nvmlDeviceGetPowerUsage(self._handle))

    def _sample(self) -> None:
        nvml, handle = self.device.nvml, self._handle
        self._rows.append(
            (
                time.perf_counter(),
                self._power_mw(),
                float(nvml.nvmlDeviceGetClockInfo(handle, self._sm_clock)),
                float(nvml.nvmlDeviceGetClockInfo(handle, self._mem_clock)),
                float(nvml.nvmlDeviceGetTemperature(handle, self._sensor)),
            )
        )

    def _loop(self) -> None:
        try:
            while not self._stopping.wait(self.interval_s):
                self._sample()
        except BaseException as exc:  # reported by stop(), in the backend's thread
            self._error = exc

    def _energy_mj(self) -> float | None:
        if not self._energy_counter:
            return None
        return float(self.device.nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))

    def start(self) -> None:
        """Begin a window: read the energy counter and one sample, then sample in the background."""
        if self._thread is not None:
            raise RuntimeError("the sampler's window is already open")
        self._rows, self._error = [], None
        self._stopping.clear()
        self._energy_start_mj = self._energy_mj()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, float]:
        """End the window and return its values.

        They are the mean power (W), energy (J), mean SM and memory clocks (MHz), highest
        temperature (°C), length (s) and number of samples."""
        if self._thread is None:
            raise RuntimeError("stop() without start()")
        self._stopping.set()
        self._thread.join()
        self._thread = None
        if self._error is not None:
            raise UserError(f"observers: reading NVML on GPU {self.device.bus_id} failed: {self._error}") from None
        self._sample()
        energy_end_mj = self._energy_mj()
        times, power_mw, sm_mhz, mem_mhz, temp_c = zip(*self._rows)
        window_s = times[-1] - times[0]
        if energy_end_mj is not None and self._energy_start_mj is not None:  # the counter is there
            energy_j = (energy_end_mj - self._energy_start_mj) / 1e3
        else:
            energy_j = _integral(times, power_mw) / 1e3
        n = len(self._rows)
        return {
            "power_w": sum(power_mw) / n / 1e3,
            "energy_j": energy_j,
            "sm_clock_mhz": sum(sm_mhz) / n,
            "mem_clock_mhz": sum(mem_mhz) / n,
            "temperature_c": max(temp_c),
            "window_s": window_s,
            "samples": float(n),
        }

    def close(self) -> None:
        """Stop a window left open and end the NVML session."""
        if self._thread is not None:
            self._stopping.set()
            self._thread.join()
            self._thread = None
        self.device.close()


def _integral(times, values) -> float:
    """Trapezoidal integral of values over times."""
    return sum((t1 - t0) * (v0 + v1) / 2 for t0, t1, v0, v1 in zip(times, times[1:], values, values[1:]))
