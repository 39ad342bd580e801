"""The CuPy backend of one rank: the hooks of gpu/backend.py, through CuPy and NVRTC.

CuPy is imported only when a backend is created: this module loads on machines without a GPU.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from mpitune.backends.base import Compiled, Compiler
from mpitune.backends.cupy.compiling import NvrtcCompiler, nvrtc_identity, nvrtc_options
from mpitune.backends.cupy.device_errors import FunctionAttribute, classify, is_sticky, kernel_limits
from mpitune.backends.cupy.device_start import device_uuid, import_cupy
from mpitune.backends.cupy.verification import GpuCheck
from mpitune.backends.gpu.backend import GpuBackend
from mpitune.backends.gpu.failures import Failure, KernelLimits, library_text
from mpitune.backends.gpu.loading import Loaded
from mpitune.backends.gpu.platform import DeviceFacts
from mpitune.backends.kernel_cache import cached
from mpitune.model.problem import Kernel

log = logging.getLogger(__name__)

DEFAULT_SMEM_LIMIT = 48 * 1024  # bytes of dynamic shared memory a launch gets without asking


class CupyBackend(GpuBackend):
    """One CUDA GPU: NVRTC compiles, CuPy loads, launches and times with events."""

    def __init__(self, problem: Kernel, workdir: str, local_rank: int):
        self.cp = import_cupy()
        self._probe: Any = None  # one value on the GPU that a round trip reads back
        super().__init__(problem, workdir, local_rank)

    def _device_count(self) -> int:
        return self.cp.cuda.runtime.getDeviceCount()

    def _use_device(self, device_id: int) -> None:
        self.cp.cuda.Device(device_id).use()

    def _device_facts(self) -> DeviceFacts:
        props = self.cp.cuda.runtime.getDeviceProperties(self.device_id)
        name = library_text(props.get("name", b"unknown GPU"))
        return DeviceFacts(name, device_uuid(props.get("uuid")), self._pci_bus_id())

    def _pci_bus_id(self) -> str:
        try:
            return self.cp.cuda.Device(self.device_id).pci_bus_id
        except Exception:  # older CuPy or a driver that does not say
            return ""

    def _make_compiler(self, local_rank: int) -> Compiler:
        from cupy_backends.cuda.libs import nvrtc

        capability = int(self.cp.cuda.Device(self.device_id).compute_capability)
        include_dir = os.path.join(os.path.dirname(self.cp.__file__), "_core", "include")
        options, image = nvrtc_options(
            self.problem.compiler_options, capability, tuple(nvrtc.getSupportedArchs()), include_dir
        )
        extras = self.problem.extras
        compiler = NvrtcCompiler(
            self.problem.kernel_source,
            self.problem.kernel_name.strip(),
            options,
            image,
            tuple(self.problem.problem_size),
            dict(self.problem.grid_div),
            tuple(self.problem.block_size_names),
            tuple(extras.cmem) if extras else (),
        )
        driver = self.cp.cuda.runtime.driverGetVersion()
        return cached(compiler, lambda: nvrtc_identity(capability, driver, self.cp.__version__), local_rank)

    # -- memory, streams and events ----------------------------------------------------

    def _new_stream(self) -> Any:
        return self.cp.cuda.Stream(non_blocking=True)

    def _new_event(self) -> Any:
        return self.cp.cuda.Event()

    def _elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self.cp.cuda.get_elapsed_time(start, end))

    def _upload(self, array: np.ndarray) -> Any:
        return self.cp.asarray(array)

    def _empty_like(self, device_array: Any) -> Any:
        return self.cp.empty_like(device_array)

    def _to_host(self, device_array: Any) -> np.ndarray:
        return self.cp.asnumpy(device_array)

    def _reset(self, dst: Any, src: Any) -> None:
        dst.data.copy_from_device_async(src.data, src.nbytes, self.stream)

    def _make_check(self, answers: list | None) -> GpuCheck:
        return GpuCheck(self.cp, self.stream, answers, self.problem.atol)

    def _after_upload(self) -> None:
        self._probe = self.cp.full(1, 42, dtype=np.int32)

    def _out_of_memory(self) -> type[Exception]:
        return self.cp.cuda.memory.OutOfMemoryError

    def _free_memory(self) -> None:
        self._probe = None
        try:
            self.cp.get_default_memory_pool().free_all_blocks()
        except Exception:
            log.debug("freeing the memory pool failed", exc_info=True)

    # -- kernels ---------------------------------------------------------------------

    def _load_kernel(self, compiled: Compiled) -> Any:
        """The kernel of a CUDA image, with its constant memory filled from cmem_args."""
        from cupy.cuda import function

        module = function.Module()
        module.load(compiled.artifact)
        kernel = module.get_function(compiled.entry)
        for name, symbol in (compiled.symbols or {}).items():
            source = self._constants[name]
            self.cp.cuda.runtime.memcpyAsync(
                module.get_global_var(symbol),
                source.data.ptr,
                source.nbytes,
                self.cp.cuda.runtime.memcpyDeviceToDevice,
                self.stream.ptr,
            )
        return kernel

    def _grant_shared_memory(self, loaded: Loaded) -> None:
        """Beyond 48 KiB, dynamic shared memory is asked for, once per kernel."""
        if loaded.smem_bytes > DEFAULT_SMEM_LIMIT:
            self.cp.cuda.driver.funcSetAttribute(
                loaded.kernel.ptr, FunctionAttribute.MAX_DYNAMIC_SHARED_BYTES, loaded.smem_bytes
            )

    def _launch(self, loaded: Loaded) -> None:
        loaded.kernel(loaded.grid, loaded.block, self._args, shared_mem=loaded.smem_bytes, stream=self.stream)

    # -- failures --------------------------------------------------------------------

    def _classify(self, exc: BaseException) -> Failure:
        return classify(exc, self._context_ok)

    def _is_sticky(self, exc: BaseException) -> bool:
        return is_sticky(exc)

    def _kernel_limits(self, kernel: Any) -> KernelLimits | None:
        return kernel_limits(self.cp, kernel)

    def _context_ok(self) -> bool:
        """A tiny round trip: a lost context fails it even when the first error looked mild."""
        try:
            self.cp.cuda.runtime.deviceSynchronize()
            return int(self._probe.get()[0]) == 42
        except Exception:
            return False
