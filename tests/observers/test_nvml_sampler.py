"""The sampler on a real GPU kept busy by CuPy: plausible readings, energy consistent with power.

Reads only; nothing here sets anything. Skipped where CuPy or a CUDA GPU is missing.
"""

from __future__ import annotations

import time

import pytest

from mpitune.observers import NVMLObserver
from mpitune.observers.nvml_sampler import PowerSampler

BUSY_S = 0.5


def _busy_window(cp, sampler: PowerSampler) -> tuple[dict[str, float], int]:
    """Matrix products back to back on GPU 0 for BUSY_S seconds inside one window."""
    with cp.cuda.Device(0):
        a = cp.random.random((4096, 4096), dtype=cp.float32)
        b = cp.random.random((4096, 4096), dtype=cp.float32)
        (a @ b).sum().item()  # warm up cuBLAS outside the window
        launches = 0
        sampler.start()
        started = time.perf_counter()
        while time.perf_counter() - started < BUSY_S:
            for _ in range(10):
                c = a @ b
            launches += 10
            c.sum().item()  # keeps the queue short, so the window ends with the work
        window = sampler.stop()
    return window, launches


@pytest.fixture(scope="module")
def busy(cp):
    sampler = PowerSampler(cp.cuda.Device(0).pci_bus_id)
    try:
        yield _busy_window(cp, sampler)
    finally:
        sampler.close()


@pytest.mark.gpu
def test_a_busy_gpu_reads_plausibly(busy):
    window, _ = busy
    assert window["power_w"] > 0
    assert window["sm_clock_mhz"] > 0
    assert window["mem_clock_mhz"] > 0
    assert 10 <= window["temperature_c"] <= 110
    assert window["energy_j"] > 0
    assert BUSY_S <= window["window_s"] < BUSY_S + 1.0
    assert window["samples"] >= 20  # every ~5 ms over half a second, whatever NVML refreshes


@pytest.mark.gpu
def test_the_windows_energy_matches_its_mean_power_over_its_length(busy):
    # Two measurements: the energy counter (or integrated power) and the mean of power samples.
    window, _ = busy
    expected_j = window["power_w"] * window["window_s"]
    assert expected_j / 3 < window["energy_j"] < expected_j * 3, window


@pytest.mark.gpu
def test_the_observer_turns_the_window_into_energy_per_kernel_execution(busy):
    window, launches = busy
    values = NVMLObserver(["nvml_energy", "nvml_power", "temperature"]).values(window, launches)
    assert values == {
        "energy_j": window["energy_j"] / launches,
        "power_w": window["power_w"],
        "temperature_c": window["temperature_c"],
    }
    assert 0 < values["energy_j"] < window["energy_j"]


@pytest.mark.gpu
def test_a_sampler_opens_one_window_at_a_time(cp):
    sampler = PowerSampler(cp.cuda.Device(0).pci_bus_id)
    try:
        sampler.start()
        with pytest.raises(RuntimeError, match="already open"):
            sampler.start()
        assert sampler.stop()["samples"] >= 2
        with pytest.raises(RuntimeError, match="stop\\(\\) without start\\(\\)"):
            sampler.stop()
    finally:
        sampler.close()
