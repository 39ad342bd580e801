"""The throttle watch: NVML's reason bits by cause, and on a real GPU kept busy by CuPy a window
whose answer is one of the causes (an H200 at work is normally not throttled; nothing here
changes the GPU's settings to make it so)."""

from __future__ import annotations

import pytest

from mpitune.observers.throttle import REASON_BITS, ThrottleWatch, reasons_of


def test_the_reason_bits_name_their_causes_and_leave_the_harmless_ones_out():
    assert reasons_of(0) == frozenset()
    assert reasons_of(0x1 | 0x2 | 0x10 | 0x100) == frozenset()  # idle, application clocks, sync boost, display
    assert reasons_of(0x4) == {"power"} and reasons_of(0x80) == {"power"}
    assert reasons_of(0x20) == {"thermal"} and reasons_of(0x40) == {"thermal"}
    assert reasons_of(0x8 | 0x40 | 0x4) == {"slowdown", "thermal", "power"}
    assert set(REASON_BITS) == {"power", "slowdown", "thermal"}


def test_without_nvml_there_is_no_watch_and_no_error():
    """On a machine without NVML (pynvml or the driver missing) the backend times unwatched."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML: the GPU test below covers it")
    except Exception:
        pass
    assert ThrottleWatch.open("0000:19:00.0") is None


@pytest.mark.gpu
def test_a_window_of_work_on_the_gpu_says_whether_its_clocks_were_held(cp):
    watch = ThrottleWatch.open(cp.cuda.Device(0).pci_bus_id)
    assert watch is not None
    try:
        a = cp.random.random((4096, 4096), dtype=cp.float32)
        window = watch.start()
        for _ in range(20):
            a = a @ a / 4096
        cp.cuda.Device(0).synchronize()
        causes = watch.stop(window)
        assert causes <= {"power", "thermal", "slowdown"}
        assert set(window.violation_ns) <= {"power", "thermal"}
    finally:
        watch.close()
