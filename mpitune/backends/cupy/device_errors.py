"""What a CUDA failure means for the configuration and for the rank: a launch the device
refuses (the configuration's ``launch_error``, the context survives), an error that poisons
the context (the rank measures nothing more), or a kernel that failed (``runtime_error``).
Pure, so the rules and their messages are tested without a GPU."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.errors import UserError
from mpitune.model.result import Status

# CUDA error codes (driver and runtime share these numbers) after which the context is
# unusable for the rest of the process: illegal/misaligned address, assert, trap, timeout...
STICKY_CODES = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 999})
# Codes a launch returns for a configuration the device cannot run; the context survives.
LAUNCH_CODES = frozenset({1, 9, 98, 209, 701, 720})


class DeviceLostError(UserError):
    """The GPU context of this rank hit a sticky error; nothing it measures can be trusted."""


class Failure(enum.Enum):
    CONTEXT_LOST = "context_lost"  # a sticky error: this configuration and the rank are done
    LAUNCH = "launch"  # the device refuses this configuration's launch
    RUNTIME = "runtime"  # the kernel failed; the context still works

    @property
    def status(self) -> Status:
        return Status.LAUNCH_ERROR if self is Failure.LAUNCH else Status.RUNTIME_ERROR


def library_text(value: Any) -> str:
    """A CUDA library's string (bytes padded with NULs) or an exception's message."""
    if isinstance(value, bytes):
        return value.decode(errors="replace").rstrip("\x00")
    return str(value)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {library_text(exc)}"


def cuda_code(exc: BaseException) -> int | None:
    """The CUDA error number of a CuPy CUDA exception, None for anything else."""
    code = getattr(exc, "status", None)
    return int(code) if isinstance(code, (int, np.integer)) else None


def is_sticky(exc: BaseException) -> bool:
    return cuda_code(exc) in STICKY_CODES


def classify(exc: BaseException, context_ok: Callable[[], bool]) -> Failure:
    """What an exception while running a configuration means. ``context_ok`` is asked only
    when the code alone does not say the context is lost: a lost context fails it even when
    the first error looked mild."""
    if is_sticky(exc) or not context_ok():
        return Failure.CONTEXT_LOST
    if cuda_code(exc) in LAUNCH_CODES:
        return Failure.LAUNCH
    return Failure.RUNTIME


def context_lost(device: str, where: str, exc: BaseException) -> str:
    """The error of the configuration that lost the context, and of every ``run`` after it."""
    return (
        f"{device} failed during {where}: {describe(exc)}. This error poisons the CUDA context of the "
        f"process, so this rank measures nothing more; the configuration is recorded as runtime_error "
        f"and a rerun resumes after it"
    )


@dataclass(frozen=True)
class KernelLimits:
    """What the driver says one compiled kernel allows (CUfunction attributes)."""

    max_threads: int
    registers: int
    static_shared_bytes: int


def launch_limits(grid: Sequence[int], block: Sequence[int], smem_bytes: int, limits: KernelLimits | None) -> str:
    """Why a launch may not fit: threads asked for against what this kernel allows (only the
    geometry when the driver could not say)."""
    threads = math.prod(block)
    grid, block = tuple(grid), tuple(block)
    if limits is None:
        return f"grid {grid}, block {block} = {threads} threads"
    smem = f" and {smem_bytes} of dynamic" if smem_bytes else ""
    return (
        f"grid {grid}, block {block} = {threads} threads; this kernel allows at most "
        f"{limits.max_threads} threads per block with {limits.registers} registers "
        f"per thread and {limits.static_shared_bytes} bytes of static shared memory{smem}"
    )


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
