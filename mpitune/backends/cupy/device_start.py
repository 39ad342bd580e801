"""CuPy imported, the rank's GPU chosen and its CUDA context opened.

The driver starts on the GPU beside CuPy's import. The two need nothing of each other: the
driver's start is ``cuInit`` and the primary context (``cuDevicePrimaryCtxRetain``).
docs/performance.md, "Start-up", has their times. A call through ctypes leaves the interpreter
to the import. So a worker starts the driver in a thread, through its library, while it imports
CuPy. CuPy's runtime then finds that primary context made and takes it. A failure here costs
only the head start: CuPy meets the same problem, and the backend reports it.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

import numpy as np

from mpitune.backends.gpu.failures import select_device
from mpitune.errors import UserError

log = logging.getLogger(__name__)

DRIVER_LIBRARY = "libcuda.so.1"
CUDA_SUCCESS = 0
INSTALL_HINT = "lang='cupy' needs CuPy: pip install cupy-cuda12x (or the wheel matching your CUDA)"


class DriverStart:
    """The driver starting in a thread; ``release()`` waits for it and gives back the extra
    hold on the primary context once CuPy's runtime holds its own."""

    def __init__(self, local_rank: int):
        self._driver: ctypes.CDLL | None = None
        self._device = ctypes.c_int(-1)
        self._thread = threading.Thread(target=self._start, args=(local_rank,), name="mpitune-cuda-start", daemon=True)
        self._thread.start()

    def _start(self, local_rank: int) -> None:
        try:
            driver = ctypes.CDLL(DRIVER_LIBRARY)
            count = ctypes.c_int(0)
            if driver.cuInit(0) != CUDA_SUCCESS or driver.cuDeviceGetCount(ctypes.byref(count)) != CUDA_SUCCESS:
                return
            ordinal = select_device(local_rank, count.value) if count.value > 0 else -1
            if ordinal < 0 or driver.cuDeviceGet(ctypes.byref(self._device), ordinal) != CUDA_SUCCESS:
                return
            context = ctypes.c_void_p()
            if driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), self._device) == CUDA_SUCCESS:
                self._driver = driver
        except OSError:  # no driver library here: CuPy will say so
            log.debug("the CUDA driver did not start ahead of CuPy", exc_info=True)

    def release(self) -> None:
        """Wait for the start, then drop its hold on the primary context (the runtime's keeps it)."""
        self._thread.join()
        if self._driver is not None:
            self._driver.cuDevicePrimaryCtxRelease(self._device)
            self._driver = None


def import_cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise UserError(f"{INSTALL_HINT} ({exc})") from None
    except Exception as exc:  # a broken CUDA installation fails inside cupy's import
        raise UserError(f"CuPy failed to load: {type(exc).__name__}: {exc}") from None
    return cupy


def open_context(local_rank: int | None) -> None:
    """What ``CupyBackend`` needs first and no problem decides.

    That is CuPy imported, and the CUDA context of this rank's GPU made, with its memory pool
    and a stream in use. The GPU is chosen as the backend will (``select_device``). The driver
    starts beside CuPy's import (``DriverStart``). Errors are left to the backend, which says
    them.
    """
    if local_rank is None:
        import_cupy()
        return
    driver = DriverStart(local_rank)
    try:
        cp = import_cupy()
        count = cp.cuda.runtime.getDeviceCount()
        if count < 1:
            return
        cp.cuda.Device(select_device(local_rank, count)).use()
        cp.cuda.runtime.free(0)  # the classic way to make the primary context now (taken, if started)
    finally:
        driver.release()
    with cp.cuda.Stream(non_blocking=True) as stream:
        cp.full(1, 42, dtype=np.int32)  # the memory pool, and the fill kernel prepare's probe uses
        stream.synchronize()
    from cupy_backends.cuda.libs import nvrtc  # what the backend's compiler asks first

    nvrtc.getSupportedArchs()


def device_uuid(raw: Any) -> str:
    """nvidia-smi's spelling of a device UUID (GPU-xxxxxxxx-...), '' when CuPy does not say."""
    if not raw:
        return ""
    h = bytes(raw).hex() if not isinstance(raw, str) else raw.encode("latin-1").hex()
    if len(h) != 32:
        return ""
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
