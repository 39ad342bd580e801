"""What a CUDA failure is: a refused launch, a poisoned context, or a failed kernel.

CUDA's error numbers decide it (gpu/failures.py says what each means for the run). Pure, so the
rules are tested without a GPU.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np

from mpitune.backends.gpu.failures import Failure, KernelLimits

# CUDA error codes (driver and runtime share these numbers) after which the context is
# unusable for the rest of the process: illegal/misaligned address, assert, trap, timeout...
STICKY_CODES = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 999})
# Codes a launch returns for a configuration the device cannot run; the context survives.
LAUNCH_CODES = frozenset({1, 9, 98, 209, 701, 720})


def cuda_code(exc: BaseException) -> int | None:
    """The CUDA error number of a CuPy CUDA exception, None for anything else."""
    code = getattr(exc, "status", None)
    return int(code) if isinstance(code, (int, np.integer)) else None


def is_sticky(exc: BaseException) -> bool:
    return cuda_code(exc) in STICKY_CODES


def classify(exc: BaseException, context_ok: Callable[[], bool]) -> Failure:
    """What an exception while running a configuration means.

    ``context_ok`` is asked only when the code alone does not say the context is lost. A lost
    context fails it even when the first error looked mild.
    """
    if is_sticky(exc) or not context_ok():
        return Failure.CONTEXT_LOST
    if cuda_code(exc) in LAUNCH_CODES:
        return Failure.LAUNCH
    return Failure.RUNTIME


class FunctionAttribute(enum.IntEnum):
    """CUfunction_attribute numbers (the CUDA driver API's, stable across versions)."""

    MAX_THREADS = 0
    STATIC_SHARED_BYTES = 1
    REGISTERS = 4
    MAX_DYNAMIC_SHARED_BYTES = 8


def kernel_limits(cp: Any, kernel: Any) -> KernelLimits | None:
    """What the driver says this compiled kernel allows; None when it does not say."""

    def get(attribute: FunctionAttribute) -> int:
        return int(cp.cuda.driver.funcGetAttribute(attribute, kernel.ptr))

    try:
        return KernelLimits(
            max_threads=get(FunctionAttribute.MAX_THREADS),
            registers=get(FunctionAttribute.REGISTERS),
            static_shared_bytes=get(FunctionAttribute.STATIC_SHARED_BYTES),
        )
    except Exception:
        return None
