"""Compiling a configuration with NVRTC: no GPU and no CUDA context, so the compile workers
that work ahead (process/compile_ahead.py) never touch the GPU the rank measures on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mpitune.backends.base import Compiled, shorten, timed
from mpitune.backends.gpu.failures import library_text
from mpitune.backends.gpu.geometry import Geometry, configured
from mpitune.model.result import Status
from mpitune.model.work import Work


def nvrtc_options(
    user: Sequence[str], capability: int, supported: Sequence[int], include_dir: str
) -> tuple[tuple[str, ...], str]:
    """The options NVRTC gets and whether it makes a cubin or PTX.

    It does as CuPy's RawModule does, and Kernel Tuner through it. It asks for machine code for
    the GPU's own architecture when this NVRTC knows it. Else it asks for PTX for the newest it
    knows, which the driver compiles at load. ``-ftz=true`` unless the user chose. CuPy's
    headers are on the include path.
    """
    options = list(user)
    arch = next((o for o in options if o.startswith(("-arch", "--gpu-architecture"))), None)
    if arch is None:
        if capability in supported:
            arch = f"-arch=sm_{capability}"
        else:
            older = [a for a in supported if a <= capability]
            arch = f"-arch=compute_{max(older) if older else min(supported)}"
        options.append(arch)
    if not any(o.startswith(("-ftz", "--ftz")) for o in options):
        options.append("-ftz=true")
    options.append(f"-I{include_dir}")
    return tuple(options), ("ptx" if "compute_" in arch else "cubin")


def warm_up() -> None:
    """Load NVRTC and compile an empty kernel.

    The first compile in a process costs more than the next (docs/performance.md, "Where a cold
    compile's time goes"). A compile worker pays that while its GPU starts up.
    """
    from cupy_backends.cuda.libs import nvrtc

    program = nvrtc.createProgram("__global__ void mpitune_warm_up() {}", "warm_up.cu", [], [])
    try:
        nvrtc.compileProgram(program, [f"-arch=compute_{min(nvrtc.getSupportedArchs())}"])
    finally:
        nvrtc.destroyProgram(program)


def nvrtc_identity(capability: int, driver_version: int, cupy_version: str) -> str:
    """What compiles and loads, for the kernel cache's key.

    That is NVRTC's version, the driver's (it compiles a PTX image at load) and CuPy's (its
    headers are on the include path). And the GPU's architecture.
    """
    from cupy_backends.cuda.libs import nvrtc

    major, minor = nvrtc.getVersion()
    return f"NVRTC {major}.{minor}, CUDA driver {driver_version}, CuPy {cupy_version}, sm_{capability}"


@dataclass(frozen=True)
class NvrtcCompiler:
    """Compiles one configuration to a CUDA image.

    Picklable and GPU-free, so any process can run it. The backend that measures only loads
    what it made.
    """

    source: str
    kernel_name: str
    options: tuple[str, ...]
    image: str  # "cubin" or "ptx"
    problem_size: tuple[int, ...]
    grid_div: dict[str, Any]
    block_size_names: tuple[str, ...]
    constants: tuple[str, ...] = ()  # __constant__ symbols that cmem_args fills

    def __call__(self, work: Work) -> Compiled:
        return timed(lambda: self._compile(work))

    def _compile(self, work: Work) -> Compiled:
        prepared = self._prepared(work)
        if isinstance(prepared, str):
            return Compiled(work.config_id, status=Status.LAUNCH_ERROR, error=prepared)
        return self._nvrtc(work.config_id, *prepared)

    def _prepared(self, work: Work) -> tuple[str, str] | str:
        """(the source after its defines, the name expression), or why there is none."""
        geometry = Geometry(self.problem_size, self.grid_div, self.block_size_names)
        return configured(self.source, self.kernel_name, work, geometry)

    def cache_key(self, work: Work) -> tuple[str | bytes, ...] | None:
        """What NVRTC is given for this configuration; None where there is nothing to compile.

        That is the options (the architecture among them), the image asked for, the name
        expressions and the source after its defines.
        """
        prepared = self._prepared(work)
        if isinstance(prepared, str):
            return None
        code, name = prepared
        counts = (str(len(self.options)), str(len(self.constants)))
        return ("cupy", self.image, *counts, *self.options, *self.constants, name, code)

    def image_path(self, work: Work) -> None:
        """A CUDA image is loaded from memory: no file."""
        return None

    def _nvrtc(self, config_id: int, code: str, name: str) -> Compiled:
        from cupy_backends.cuda.libs import nvrtc  # CuPy's NVRTC binding: no GPU, no context

        expressions = [name] + [f"&{symbol}" for symbol in self.constants]
        program = nvrtc.createProgram(code, "kernel.cu", [], [])
        try:
            for expression in expressions:
                nvrtc.addNameExpression(program, expression)
            try:
                nvrtc.compileProgram(program, list(self.options))
            except nvrtc.NVRTCError as exc:
                return Compiled(
                    config_id,
                    status=Status.COMPILE_ERROR,
                    error=shorten(library_text(nvrtc.getProgramLog(program)) or str(exc)),
                )
            image = nvrtc.getCUBIN(program) if self.image == "cubin" else nvrtc.getPTX(program)
            lowered = [library_text(nvrtc.getLoweredName(program, e)) for e in expressions]
        finally:
            nvrtc.destroyProgram(program)
        return Compiled(
            config_id,
            artifact=image if isinstance(image, bytes) else image.encode(),
            entry=lowered[0],
            symbols=dict(zip(self.constants, lowered[1:])),
        )
