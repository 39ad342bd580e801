"""CUDA kernels on one GPU per rank, through CuPy. See docs/cupy-backend.md.

NVRTC compiles each configuration; CuPy events time it. The measuring is gpu/backend.py's.

- compiling.py: NVRTC, in any process, without a GPU.
- verification.py: outputs compared with their answers on the GPU.
- device_errors.py: which CUDA errors refuse a launch or lose the context.
- device_start.py: CuPy imported, the GPU chosen, its context opened (the driver started ahead).
- backend.py: ``GpuBackend``'s hooks through CuPy.

Nothing here imports CuPy until a backend is created or a compile worker warms up. So
``check`` and the rest of the package work on machines without a GPU.
"""

from __future__ import annotations

import re

from mpitune.backends.base import Backend
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.backends.cupy.compiling import warm_up
from mpitune.model.problem import Kernel
from mpitune.observers.nvml import TUNABLES

CAPABILITIES = Capabilities(
    lang="cupy",
    aliases=("cuda",),
    module="cupy",
    device=DeviceKind.GPU,
    kernel_name=re.compile(r"^\s*[A-Za-z_][\w:]*\s*(<.*>)?\s*$"),
    kernel_name_rule="a C++ function name or a template instance such as 'name<float, 64>'",
    memory_kinds=frozenset({"smem_args", "cmem_args"}),
    max_float_bytes=8,
    max_complex_bytes=16,
    complex_answers=False,
    launch_geometry=True,
    observers=("NVMLObserver",),
    device_tunables=TUNABLES,
)

__all__ = ["CAPABILITIES", "create", "prewarm", "warm_up"]


def prewarm(local_rank: int | None) -> None:
    """CuPy imported and, once the device is known, its CUDA context made: a worker does this
    while rank 0 still loads the spec (process/isolation.py)."""
    from mpitune.backends.cupy.device_start import open_context

    open_context(local_rank)


def create(kernel: Kernel, workdir: str, local_rank: int) -> Backend:
    """The backend of this rank; raises UserError when CuPy or a GPU is missing."""
    from mpitune.backends.cupy.backend import CupyBackend

    return CupyBackend(kernel, workdir, local_rank)
