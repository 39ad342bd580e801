"""What a failed launch means, for any GPU backend.

A launch the device refuses is the configuration's ``launch_error``; the context survives. Some
errors poison the context: the rank then measures nothing more. Any other failure is a
``runtime_error``. Which error is which is the platform's own (cupy/device_errors.py for CUDA).
Pure, so the messages are tested without a GPU.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mpitune.errors import UserError
from mpitune.model.result import Status


class DeviceLostError(UserError):
    """The GPU context of this rank is lost: nothing it measures can be trusted."""


class Failure(enum.Enum):
    CONTEXT_LOST = "context_lost"  # a sticky error: this configuration and the rank are done
    LAUNCH = "launch"  # the device refuses this configuration's launch
    RUNTIME = "runtime"  # the kernel failed; the context still works

    @property
    def status(self) -> Status:
        return Status.LAUNCH_ERROR if self is Failure.LAUNCH else Status.RUNTIME_ERROR


def select_device(rank_on_node: int, device_count: int) -> int:
    """One GPU per rank: the node-local rank modulo the GPUs this process can see."""
    if device_count < 1:
        raise ValueError("no GPU visible")
    return rank_on_node % device_count


def library_text(value: Any) -> str:
    """A GPU library's string (bytes padded with NULs) or an exception's message."""
    if isinstance(value, bytes):
        return value.decode(errors="replace").rstrip("\x00")
    return str(value)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {library_text(exc)}"


def context_lost(device: str, where: str, exc: BaseException, platform: str = "CUDA") -> str:
    """The error of the configuration that lost the context, and of every ``run`` after it."""
    return (
        f"{device} failed during {where}: {describe(exc)}. This error poisons the {platform} context of the "
        f"process, so this rank measures nothing more; the configuration is recorded as runtime_error "
        f"and a rerun resumes after it"
    )


@dataclass(frozen=True)
class KernelLimits:
    """What the driver says one compiled kernel allows."""

    max_threads: int
    registers: int
    static_shared_bytes: int


def launch_limits(grid: Sequence[int], block: Sequence[int], smem_bytes: int, limits: KernelLimits | None) -> str:
    """Why a launch may not fit: the threads asked for, against what this kernel allows.

    Only the geometry when the driver could not say.
    """
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
