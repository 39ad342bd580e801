"""A GPU platform on the host, to test ``GpuBackend`` where there is no GPU.

It is not a stand-in for CuPy: it implements the platform hooks of backends/gpu/platform.py as a
second platform would. gcc compiles each configuration's source after its ``#define`` lines, as
NVRTC would get it; ctypes loads the library and calls the kernel once per launch. Arrays stay
numpy arrays; events read the host's clock. A launch asks for at most ``MAX_THREADS`` threads and
``MAX_SMEM_BYTES`` of dynamic shared memory, else it is refused; a kernel that returns non-zero
traps, which loses the "context" as a GPU's sticky errors do.

Kernels are ``int NAME(...)``: arrays are passed as pointers, numpy int32 scalars as ints.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.backends.base import Compiled, Compiler, shorten, timed
from mpitune.backends.c import run_compiler
from mpitune.backends.compare import mismatch
from mpitune.backends.gpu.backend import GpuBackend
from mpitune.backends.gpu.failures import Failure, KernelLimits
from mpitune.backends.gpu.geometry import Geometry, configured
from mpitune.backends.gpu.loading import Loaded
from mpitune.backends.gpu.platform import DeviceFacts
from mpitune.model.result import Status
from mpitune.model.work import Work

MAX_THREADS = 1024
MAX_SMEM_BYTES = 64 * 1024


class Refused(Exception):
    """The launch asks for more than the device has: the context survives."""


class Trap(Exception):
    """The kernel trapped: the context is lost."""


@dataclass(frozen=True)
class HostCompiler:
    """gcc, given the source exactly as a GPU compiler would get it."""

    source: str
    kernel_name: str
    geometry: Geometry
    workdir: str

    def __call__(self, work: Work) -> Compiled:
        return timed(lambda: self._build(work))

    def _build(self, work: Work) -> Compiled:
        prepared = configured(self.source, self.kernel_name, work, self.geometry)
        if isinstance(prepared, str):
            return Compiled(work.config_id, status=Status.LAUNCH_ERROR, error=prepared)
        code, name = prepared
        source = os.path.join(self.workdir, f"config{work.config_id}.c")
        library = os.path.join(self.workdir, f"config{work.config_id}.so")
        with open(source, "w", encoding="utf-8") as fh:
            fh.write(code)
        proc = run_compiler(["gcc", "-O1", "-fPIC", "-shared", "-o", library, source])
        if proc.returncode != 0:
            return Compiled(work.config_id, status=Status.COMPILE_ERROR, error=shorten(proc.stderr))
        return Compiled(work.config_id, artifact=library, entry=name)


class HostStream:
    def __enter__(self) -> HostStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        return None


class HostEvent:
    def __init__(self) -> None:
        self.ns = 0

    def record(self, stream: Any) -> None:
        self.ns = time.perf_counter_ns()

    def synchronize(self) -> None:
        return None


class HostCheck:
    def __init__(self, answers: Sequence[Any] | None, atol: float):
        self.answers, self.atol = answers, atol

    def warm_up(self, outputs: Sequence[Any]) -> None:
        return None

    def mismatch(self, outputs: Sequence[Any]) -> str:
        return mismatch(np, outputs, self.answers, self.atol)


class HostKernel:
    """A loaded library's kernel; the library stays loaded while this lives."""

    def __init__(self, library: ctypes.CDLL, function: Any):
        self.library, self.function = library, function
        self.function.restype = ctypes.c_int

    def __call__(self, args: Sequence[Any]) -> int:
        values = [ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else ctypes.c_int(int(a)) for a in args]
        return int(self.function(*values))


class HostGpu(GpuBackend):
    """``GpuBackend`` on the host platform above; ``devices`` is how many it pretends to see."""

    PLATFORM = "host"
    VISIBLE_DEVICES = "HOST_VISIBLE_DEVICES"

    def __init__(self, problem: Any, workdir: str, local_rank: int = 0, devices: int = 1, throttle: Any = None):
        self.devices, self.memory_bytes, self.launches = devices, 1 << 30, 0
        super().__init__(problem, workdir, local_rank)
        if throttle is not None:
            self._throttle = throttle

    def _device_count(self) -> int:
        return self.devices

    def _use_device(self, device_id: int) -> None:
        return None

    def _device_facts(self) -> DeviceFacts:
        return DeviceFacts("host GPU double", "", "")

    def _make_compiler(self, local_rank: int) -> Compiler:
        return HostCompiler(self.problem.kernel_source, self.problem.kernel_name, self.geometry, self.workdir)

    def _new_stream(self) -> HostStream:
        return HostStream()

    def _new_event(self) -> HostEvent:
        return HostEvent()

    def _elapsed_ms(self, start: Any, end: Any) -> float:
        return (end.ns - start.ns) / 1e6

    def _upload(self, array: np.ndarray) -> Any:
        if array.nbytes > self.memory_bytes:
            raise MemoryError(f"{array.nbytes} bytes asked, {self.memory_bytes} free")
        return np.array(array, copy=True)

    def _empty_like(self, device_array: Any) -> Any:
        return np.empty_like(device_array)

    def _to_host(self, device_array: Any) -> np.ndarray:
        return np.array(device_array, copy=True)

    def _reset(self, dst: Any, src: Any) -> None:
        dst[...] = src

    def _make_check(self, answers: list | None) -> HostCheck:
        return HostCheck(answers, self.problem.atol)

    def _load_kernel(self, compiled: Compiled) -> HostKernel:
        library = ctypes.CDLL(os.fsdecode(compiled.artifact))
        return HostKernel(library, getattr(library, compiled.entry))

    def _grant_shared_memory(self, loaded: Loaded) -> None:
        return None

    def _launch(self, loaded: Loaded) -> None:
        threads = int(np.prod(loaded.block))
        if threads > MAX_THREADS or loaded.smem_bytes > MAX_SMEM_BYTES:
            raise Refused("too many resources requested for launch")
        self.launches += 1
        if loaded.kernel(self._args):
            raise Trap("the kernel trapped")

    def _classify(self, exc: BaseException) -> Failure:
        if isinstance(exc, Trap):
            return Failure.CONTEXT_LOST
        return Failure.LAUNCH if isinstance(exc, Refused) else Failure.RUNTIME

    def _is_sticky(self, exc: BaseException) -> bool:
        return isinstance(exc, Trap)

    def _kernel_limits(self, kernel: Any) -> KernelLimits | None:
        return KernelLimits(MAX_THREADS, 32, 0)

    def _out_of_memory(self) -> type[Exception]:
        return MemoryError

    def _free_memory(self) -> None:
        return None
