"""CUDA kernels on one GPU: NVRTC compiles each configuration through CuPy, CuPy events time it.

One backend per rank, one GPU per backend. Arguments and answers are uploaded once in
``prepare``; every configuration is compiled with its parameters as ``#define`` lines by
NVRTC to a CUDA image (``NvrtcCompiler``, which needs no GPU and so also runs in the compile
workers that work ahead, see compile_ahead.py), loaded, run once on freshly reset outputs
(verification, which doubles as the untimed warm-up), compared with the answers on the GPU,
and then timed ``iterations`` times with events on the backend's own stream. See
docs/cupy-backend.md.

CuPy is imported only when a backend is created, so that ``check`` and the rest of the
package work on machines without a GPU.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mpitune.backends.base import Backend, Compiled, median_ms, shorten, timed
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.errors import UserError
from mpitune.model.kernel_extras import Derived, substitute
from mpitune.model.restrictions import evaluate
from mpitune.model.result import COMPILE_ERROR, LAUNCH_ERROR, OK, RUNTIME_ERROR, VERIFY_FAILED, Result
from mpitune.model.timeline import Timeline
from mpitune.observers.nvml import TUNABLES

log = logging.getLogger(__name__)

INSTALL_HINT = "lang='cupy' needs CuPy: pip install cupy-cuda12x (or the wheel matching your CUDA)"

# CUDA error codes (driver and runtime share these numbers) after which the context is
# unusable for the rest of the process: illegal/misaligned address, assert, trap, timeout...
STICKY_CODES = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 999})
# Codes a launch returns for a configuration the device cannot run; the context survives.
LAUNCH_CODES = frozenset({1, 9, 98, 209, 701, 720})

CAPABILITIES = Capabilities(
    lang="cupy", aliases=("cuda",), module="cupy_nvrtc", device=DeviceKind.GPU,
    kernel_name=re.compile(r"^\s*[A-Za-z_][\w:]*\s*(<.*>)?\s*$"),
    kernel_name_rule="a C++ function name or a template instance such as 'name<float, 64>'",
    memory_kinds=frozenset({"smem_args", "cmem_args"}), max_float_bytes=8, max_complex_bytes=16,
    complex_answers=False, launch_geometry=True, observers=("NVMLObserver",), device_tunables=TUNABLES,
)
AXES = "xyz"
DEFAULT_SMEM_LIMIT = 48 * 1024  # bytes of dynamic shared memory a launch gets without asking
# CUfunction_attribute numbers (the CUDA driver API's, stable across versions)
_ATTR = {"max_threads": 0, "static_shared_bytes": 1, "registers": 4, "max_dynamic_shared_bytes": 8}


class DeviceLostError(UserError):
    """The GPU context of this rank hit a sticky error; nothing it measures can be trusted."""


# --------------------------------------------------------------------------------------
# Launch geometry: pure functions, usable and tested without a GPU.
# --------------------------------------------------------------------------------------

def block_dims(config: Mapping, block_size_names: Sequence[str]) -> tuple[int, int, int]:
    """Threads per block: the parameters named in block_size_names, 1 where one is not tuned."""
    dims = [int(config.get(name, 1)) for name in block_size_names]
    return tuple((dims + [1, 1, 1])[:3])


def _divisor(axis: int, grid_div, config: Mapping, block_size_names: Sequence[str]):
    if grid_div is None:
        # Kernel Tuner's default: divide by this axis' block size when it is tuned.
        name = block_size_names[axis] if axis < len(block_size_names) else None
        return config[name] if name in config else 1
    if isinstance(grid_div, str):
        return evaluate(grid_div, config)
    return math.prod(evaluate(entry, config) for entry in grid_div)


def grid_dims(problem_size: Sequence[int], config: Mapping, grid_div: Mapping,
              block_size_names: Sequence[str]) -> tuple[int, int, int]:
    """Blocks per grid: ceil(problem_size / divisor) per axis, with Kernel Tuner's grid_div rules.

    ``grid_div[axis]`` is None (the axis' block size), a list of parameter names whose
    product divides, or an expression over the parameters.
    """
    dims = []
    for axis, name in enumerate(AXES):
        size = problem_size[axis] if axis < len(problem_size) else 1
        div = _divisor(axis, grid_div.get(name), config, block_size_names)
        if not div > 0:
            raise ValueError(f"grid_div_{name} is {div!r} for this configuration; it must be positive")
        exact = isinstance(div, (int, np.integer)) and not isinstance(div, bool)
        dims.append(-(-int(size) // int(div)) if exact else math.ceil(size / div))
    return tuple(dims)


def _define_value(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    return str(value)


def kernel_code(source: str, config: Mapping, block: Sequence[int], grid: Sequence[int],
                defines: Mapping[str, str] | None = None) -> str:
    """The source after its ``#define`` lines: by default one per parameter, for
    block_size_x/y/z and grid_size_x/y/z, and ``kernel_tuner`` (kernels written for Kernel
    Tuner test it); with the spec's ``defines``, exactly those, as in Kernel Tuner.

    ``#line 1`` keeps NVRTC's line numbers those of the user's file.
    """
    if defines is None:
        defines = {k: _define_value(v) for k, v in config.items()}
        for axis, b, g in zip(AXES, block, grid):
            defines.setdefault(f"block_size_{axis}", str(b))
            defines.setdefault(f"grid_size_{axis}", str(g))
        defines.setdefault("kernel_tuner", "1")
    lines = [f"#define {k} {v}" for k, v in defines.items()]
    return "\n".join(lines) + "\n#line 1\n" + source


def template_name(kernel_name: str, config: Mapping) -> str:
    """``name<float, tile_x>`` with the parameters in its template arguments replaced by
    their values (``name<float, 4>``): the instance NVRTC is asked for."""
    base, bracket, args = kernel_name.partition("<")
    return base + bracket + substitute(args, config) if bracket else kernel_name


# --------------------------------------------------------------------------------------
# Compiling: NVRTC only, no GPU, no CUDA context (so compile workers never touch the GPU)
# --------------------------------------------------------------------------------------

def nvrtc_options(user: Sequence[str], capability: int, supported: Sequence[int],
                  include_dir: str) -> tuple[tuple[str, ...], str]:
    """The options NVRTC gets and whether it makes a cubin or PTX.

    As CuPy's RawModule does (and Kernel Tuner through it): machine code for the GPU's own
    architecture when this NVRTC knows it, else PTX for the newest it knows, which the driver
    compiles at load; ``-ftz=true`` unless the user chose; CuPy's headers on the include path.
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
    """Load NVRTC and compile an empty kernel: the first compile in a process costs about a
    second more than the next, and a compile worker pays that while its GPU starts up."""
    from cupy_backends.cuda.libs import nvrtc

    program = nvrtc.createProgram("__global__ void mpitune_warm_up() {}", "warm_up.cu", [], [])
    try:
        nvrtc.compileProgram(program, [f"-arch=compute_{min(nvrtc.getSupportedArchs())}"])
    finally:
        nvrtc.destroyProgram(program)


@dataclass(frozen=True)
class NvrtcCompiler:
    """Compiles one configuration to a CUDA image. Picklable and GPU-free, so any process
    can run it; the backend that measures only loads what it made."""

    source: str
    kernel_name: str
    options: tuple[str, ...]
    image: str  # "cubin" or "ptx"
    problem_size: tuple[int, ...]
    grid_div: dict
    block_size_names: tuple[str, ...]
    constants: tuple[str, ...] = ()  # __constant__ symbols that cmem_args fills

    def __call__(self, config_id: int, config: dict, derived: Derived | None = None) -> Compiled:
        return timed(lambda: self._compile(config_id, config, derived))

    def _compile(self, config_id: int, config: dict, derived: Derived | None) -> Compiled:
        try:
            block = block_dims(config, self.block_size_names)
            grid = grid_dims(self.problem_size, config, self.grid_div, self.block_size_names)
        except (ValueError, ArithmeticError, KeyError, TypeError) as exc:
            return Compiled(config_id, status=LAUNCH_ERROR, error=f"cannot compute the launch geometry: {exc}")
        code = kernel_code(self.source, config, block, grid, derived.defines if derived else None)
        return self._nvrtc(config_id, code, template_name(self.kernel_name, config))

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
                return Compiled(config_id, status=COMPILE_ERROR,
                                error=shorten(_text(nvrtc.getProgramLog(program)) or str(exc)))
            image = nvrtc.getCUBIN(program) if self.image == "cubin" else nvrtc.getPTX(program)
            lowered = [_text(nvrtc.getLoweredName(program, e)) for e in expressions]
        finally:
            nvrtc.destroyProgram(program)
        return Compiled(config_id, artifact=image if isinstance(image, bytes) else image.encode(),
                        entry=lowered[0], symbols=dict(zip(self.constants, lowered[1:])))


# --------------------------------------------------------------------------------------
# Device selection
# --------------------------------------------------------------------------------------

def select_device(rank_on_node: int, device_count: int) -> int:
    """One GPU per rank: the node-local rank modulo the GPUs this process can see."""
    if device_count < 1:
        raise ValueError("no GPU visible")
    return rank_on_node % device_count


# --------------------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------------------

def _import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise UserError(f"{INSTALL_HINT} ({exc})") from None
    except Exception as exc:  # a broken CUDA installation fails inside cupy's import
        raise UserError(f"CuPy failed to load: {type(exc).__name__}: {exc}") from None
    return cupy


def _cuda_code(exc: BaseException) -> int | None:
    """The CUDA error number of a CuPy CUDA exception, None for anything else."""
    code = getattr(exc, "status", None)
    return int(code) if isinstance(code, (int, np.integer)) else None


class CupyBackend(Backend):
    """One GPU, chosen by this rank's place on its node; see the module docstring."""

    def __init__(self, problem, workdir: str, local_rank: int):
        self.cp = _import_cupy()
        self.problem = problem
        self.workdir = workdir
        self.fatal_error = ""  # set once the CUDA context is lost; run() then refuses
        self.device_id = self._open_device(local_rank)
        props = self.cp.cuda.runtime.getDeviceProperties(self.device_id)
        self.device_name = _text(props.get("name", b"unknown GPU"))
        self.device_uuid = _uuid(props.get("uuid"))
        self.device_pci_bus_id = self._pci_bus_id()
        self.device_detail = f"GPU {self.device_id}, PCI {self.device_pci_bus_id}, {self.device_uuid}"
        self._compiler = self._make_compiler()
        self._observer = problem.observers[0] if problem.observers else None
        self._sampler = self._clocks = None
        self._open_nvml()
        self._args: tuple = ()
        self._pristine: list = []
        self._answers: list = []
        self._constants: dict = {}  # cmem_args on the GPU, copied into each module's symbols
        self._smem_bytes = 0  # dynamic shared memory of the configuration being measured
        self._probe = None
        self._reduce = None
        log.info("GPU %d of this node: %s (%s, PCI %s)", self.device_id, self.device_name,
                 self.device_uuid, self.device_pci_bus_id)

    def _open_device(self, rank: int) -> int:
        """The GPU of this rank's place among the ranks of its node (the MPI library's count of
        ranks sharing the node), modulo the GPUs it can see."""
        cp = self.cp
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:
            raise UserError(f"no usable CUDA GPU on this node ({_text(exc)})") from None
        if count < 1:
            raise UserError("no CUDA GPU visible to this process (check CUDA_VISIBLE_DEVICES)")
        device_id = select_device(rank, count)
        if rank >= count:
            log.warning("local rank %d but only %d GPU(s) visible: GPU %d is shared and its "
                        "timings will interfere", rank, count, device_id)
        log.debug("local rank %d -> GPU %d of %d", rank, device_id, count)
        cp.cuda.Device(device_id).use()
        return device_id

    def _open_nvml(self) -> None:
        """Put back GPU settings a crashed run left changed, then open what the spec asks
        NVML for: a power sampler, clock and power-limit control (see observers/)."""
        from mpitune.observers import restore_file
        from mpitune.observers.nvml import TUNABLES
        from mpitune.observers.nvml_control import ClockControl, recover
        from mpitune.observers.nvml_sampler import PowerSampler

        restore_path = restore_file.path_for(self.problem.cache_path or "mpitune", self.device_pci_bus_id)
        recover(restore_path)
        if any(name in self.problem.tune_params for name in TUNABLES):
            self._clocks = ClockControl(self.device_pci_bus_id, self.problem.tune_params, restore_path)
        if self._observer is not None:
            self._sampler = PowerSampler(self.device_pci_bus_id)

    def _make_compiler(self) -> NvrtcCompiler:
        from cupy_backends.cuda.libs import nvrtc

        capability = int(self.cp.cuda.Device(self.device_id).compute_capability)
        include_dir = os.path.join(os.path.dirname(self.cp.__file__), "_core", "include")
        options, image = nvrtc_options(self.problem.compiler_options, capability,
                                       tuple(nvrtc.getSupportedArchs()), include_dir)
        extras = self.problem.extras
        return NvrtcCompiler(self.problem.kernel_source, self.problem.kernel_name.strip(), options, image,
                             tuple(self.problem.problem_size), dict(self.problem.grid_div),
                             tuple(self.problem.block_size_names),
                             tuple(extras.cmem) if extras else ())

    def compiler(self) -> NvrtcCompiler:
        return self._compiler

    def _pci_bus_id(self) -> str:
        try:
            return self.cp.cuda.Device(self.device_id).pci_bus_id
        except Exception:  # older CuPy or a driver that does not say
            return ""

    # -- once per run ----------------------------------------------------------------

    def prepare(self) -> None:
        """Upload arguments, pristine copies of them and the answers once per run."""
        cp = self.cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        n = self.problem.iterations
        self._starts = [cp.cuda.Event() for _ in range(n)]
        self._ends = [cp.cuda.Event() for _ in range(n)]
        try:
            with self.stream:
                self._pristine = [cp.asarray(a) if isinstance(a, np.ndarray) else None
                                  for a in self.problem.arguments]
                self._args = tuple(cp.empty_like(p) if p is not None else a
                                   for p, a in zip(self._pristine, self.problem.arguments))
                answer = self.problem.answer or [None] * len(self._args)
                self._answers = [None if a is None else cp.asarray(a) for a in answer]
                if self.problem.extras:
                    self._constants = {k: cp.asarray(v) for k, v in self.problem.extras.cmem.items()}
                self._probe = cp.full(1, 42, dtype=np.int32)
                self._reduce = _count_bad_kernel(cp)
                # Load the comparison kernels now, not during the first configuration.
                for expected in self._answers:
                    if expected is not None:
                        self._count_bad(expected, expected)
            self.stream.synchronize()
            if self._clocks is not None:  # no permission: one line now, before anything is measured
                self._clocks.apply({k: v[0] for k, v in self.problem.tune_params.items()})
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise UserError(f"the arguments and answers do not fit on {self.device_name}: {exc}") from None

    def close(self) -> None:
        """Free device memory; after a lost context only drop the references."""
        try:
            if not self.fatal_error and self._args:
                self.stream.synchronize()
        except Exception:  # closing must never hide the error that ended the run
            log.debug("synchronising on close failed", exc_info=True)
        self._args, self._pristine, self._answers, self._probe = (), [], [], None
        self._constants = {}
        for nvml in (self._clocks, self._sampler):  # the clocks go back to what they were
            if nvml is not None:
                nvml.close()
        try:
            self.cp.get_default_memory_pool().free_all_blocks()
        except Exception:
            log.debug("freeing the memory pool failed", exc_info=True)

    # -- once per configuration ------------------------------------------------------

    def run(self, config_id: int, config: dict, timeline: Timeline, derived: Derived | None = None,
            compiled: Compiled | None = None) -> Result:
        if self.fatal_error:
            raise DeviceLostError(self.fatal_error)
        result = Result(config_id=config_id, status=OK)
        ahead_s = 0.0 if compiled is None else compiled.compile_s  # spent elsewhere, before this
        with timeline.phase("compile", config_id) as t:
            if compiled is None:
                compiled = self._compiler(config_id, config, derived)
            kernel, error = (None, compiled.error) if compiled.status else self._load(compiled)
        result.compile_s = ahead_s + t.elapsed_s
        if kernel is None:
            result.status = compiled.status or (RUNTIME_ERROR if self.fatal_error else COMPILE_ERROR)
            result.error = error
            return result
        block = block_dims(config, self.problem.block_size_names)  # computable: it compiled
        grid = grid_dims(self.problem.problem_size, config, self.problem.grid_div, self.problem.block_size_names)
        self._smem_bytes = derived.smem_bytes if derived else 0
        try:
            if self._clocks is not None:
                self._clocks.apply(config)
            self._measure(kernel, grid, block, result, timeline)
            if self._observer is not None and result.ok:
                with timeline.phase("benchmark", config_id) as t:
                    result.observed = self._observe(kernel, grid, block, result.time_ms)
                result.benchmark_s += t.elapsed_s
        except UserError as exc:  # NVML refused a setting it accepted before
            result.status, result.error = RUNTIME_ERROR, str(exc)
        finally:
            del kernel  # the last reference to its module, which unloads it
        return result

    def _observe(self, kernel, grid, block, time_ms: float) -> dict[str, float]:
        """Power, energy, clocks and temperature over back-to-back launches filling the
        observer's window (NVML refreshes too seldom to see a few iterations). NaN, with a
        warning, when NVML fails: the timing stands."""
        launches = self._observer.launches(time_ms)
        try:
            self._sampler.start()
            for _ in range(launches):
                self._launch(kernel, grid, block)
            self.stream.synchronize()
            return self._observer.values(self._sampler.stop(), launches)
        except Exception as exc:
            log.warning("NVML observation failed: %s", exc)
            return {}

    def _load(self, compiled: Compiled):
        """(kernel, '') or (None, why): the loader's complaint (ptxas limits of a PTX image,
        a missing symbol). Fills the module's constant memory from cmem_args."""
        from cupy.cuda import function

        try:
            module = function.Module()
            module.load(compiled.artifact)
            kernel = module.get_function(compiled.entry)
            for name, symbol in (compiled.symbols or {}).items():
                source = self._constants[name]
                self.cp.cuda.runtime.memcpyAsync(module.get_global_var(symbol), source.data.ptr, source.nbytes,
                                                 self.cp.cuda.runtime.memcpyDeviceToDevice, self.stream.ptr)
            return kernel, ""
        except Exception as exc:
            if _cuda_code(exc) in STICKY_CODES:
                self._lose_context(exc, "loading the module")
                return None, self.fatal_error
            return None, shorten(f"{type(exc).__name__}: {_text(exc)}")

    def _measure(self, kernel, grid, block, result: Result, timeline: Timeline) -> None:
        """Verify (also the warm-up), then time; any failure becomes the result's status."""
        phase, failure, times = "verify", None, []
        with timeline.phase("verify", result.config_id) as t:
            try:
                result.error = self._verify(kernel, grid, block)
            except Exception as exc:
                failure = exc
        result.verify_s = t.elapsed_s
        if failure is None and result.error:
            result.status = VERIFY_FAILED
            return
        if failure is None:
            phase = "benchmark"
            with timeline.phase("benchmark", result.config_id) as t:
                try:
                    times = self._benchmark(kernel, grid, block)
                except Exception as exc:
                    failure = exc
            result.benchmark_s = t.elapsed_s
        if failure is not None:
            result.status, result.error = self._failure(failure, kernel, grid, block, phase)
            return
        result.times_ms, result.time_ms = times, median_ms(times)

    def _launch(self, kernel, grid, block) -> None:
        kernel(grid, block, self._args, shared_mem=self._smem_bytes, stream=self.stream)

    def _verify(self, kernel, grid, block) -> str:
        """Reset every array, run once (this is also the warm-up) and compare on the GPU.
        Beyond 48 KiB, dynamic shared memory must be asked for, once per kernel, first."""
        if self._smem_bytes > DEFAULT_SMEM_LIMIT:
            self.cp.cuda.driver.funcSetAttribute(kernel.ptr, _ATTR["max_dynamic_shared_bytes"], self._smem_bytes)
        for dst, src in zip(self._args, self._pristine):
            if src is not None and src.nbytes:
                dst.data.copy_from_device_async(src.data, src.nbytes, self.stream)
        self._launch(kernel, grid, block)
        self.stream.synchronize()
        if self.problem.answer is None:
            return ""
        return self._mismatch()

    def _benchmark(self, kernel, grid, block) -> list[float]:
        """Every iteration between its own pair of events; one host sync at the end."""
        for start, end in zip(self._starts, self._ends):
            start.record(self.stream)
            self._launch(kernel, grid, block)
            end.record(self.stream)
        self._ends[-1].synchronize()
        return [float(self.cp.cuda.get_elapsed_time(s, e)) for s, e in zip(self._starts, self._ends)]

    # -- verification on the GPU -------------------------------------------------------

    def _count_bad(self, got, expected) -> int:
        """How many values differ by more than atol (NaN counts as different), as base.mismatch."""
        cp = self.cp
        atol = np.float64(self.problem.atol)
        with self.stream:
            if got.dtype.kind == "c" or expected.dtype.kind == "c":
                diff = cp.abs(got.astype(np.complex128) - expected.astype(np.complex128))
                return int(cp.count_nonzero(~(diff <= atol)))
            return int(self._reduce(got, expected, atol))

    def _mismatch(self) -> str:
        for i, (got, expected) in enumerate(zip(self._args, self._answers)):
            if expected is None:
                continue
            bad = self._count_bad(got, expected)
            if bad:
                return (f"argument {i}: {bad} of {got.size} values differ by more than "
                        f"atol={self.problem.atol:g} (largest difference {self._largest_diff(got, expected):g})")
        return ""

    def _largest_diff(self, got, expected) -> float:
        cp = self.cp
        with self.stream:
            kind = np.complex128 if "c" in (got.dtype.kind, expected.dtype.kind) else np.float64
            diff = cp.abs(got.astype(kind) - expected.astype(kind))
            return float(cp.nanmax(diff)) if not bool(cp.isnan(diff).all()) else float("nan")

    # -- failures --------------------------------------------------------------------

    def _failure(self, exc: Exception, kernel, grid, block, phase: str) -> tuple[str, str]:
        """Status and message of an exception while running a configuration."""
        code = _cuda_code(exc)
        text = f"{type(exc).__name__}: {_text(exc)}"
        if code in STICKY_CODES or not self._context_ok():
            self._lose_context(exc, f"the {phase} run")
            return RUNTIME_ERROR, self.fatal_error
        if code in LAUNCH_CODES:
            return LAUNCH_ERROR, f"{text} ({self._launch_limits(kernel, grid, block)})"
        return RUNTIME_ERROR, text

    def _launch_limits(self, kernel, grid, block) -> str:
        """Why a launch may not fit: threads asked for against what this kernel allows."""
        threads = math.prod(block)
        smem = f" and {self._smem_bytes} of dynamic" if self._smem_bytes else ""
        try:
            attr = {k: self.cp.cuda.driver.funcGetAttribute(v, kernel.ptr) for k, v in _ATTR.items()}
            return (f"grid {grid}, block {block} = {threads} threads; this kernel allows at most "
                    f"{attr['max_threads']} threads per block with {attr['registers']} registers "
                    f"per thread and {attr['static_shared_bytes']} bytes of static shared memory{smem}")
        except Exception:
            return f"grid {grid}, block {block} = {threads} threads"

    def _context_ok(self) -> bool:
        """A tiny round trip: a lost context fails it even when the first error looked mild."""
        try:
            self.cp.cuda.runtime.deviceSynchronize()
            return int(self._probe.get()[0]) == 42
        except Exception:
            return False

    def _lose_context(self, exc: Exception, where: str) -> None:
        self.fatal_error = (
            f"GPU {self.device_id} ({self.device_name}) failed during {where}: {type(exc).__name__}: "
            f"{_text(exc)}. This error poisons the CUDA context of the process, so this rank measures "
            f"nothing more; the configuration is recorded as runtime_error and a rerun resumes after it")
        log.error("%s", self.fatal_error)


def _count_bad_kernel(cp):
    """A fused reduction: no temporary arrays the size of the output."""
    return cp.ReductionKernel(
        "T got, U expected, float64 atol", "int64 bad",
        "!(fabs((double)got - (double)expected) <= atol)", "a + b", "bad = a", "0",
        "mpitune_count_bad")


def _text(value) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace").rstrip("\x00")
    return str(value)


def _uuid(raw) -> str:
    """nvidia-smi's spelling of a device UUID (GPU-xxxxxxxx-...), '' when CuPy does not say."""
    if not raw:
        return ""
    h = bytes(raw).hex() if not isinstance(raw, str) else raw.encode("latin-1").hex()
    if len(h) != 32:
        return ""
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def create(problem, workdir: str, local_rank: int) -> Backend:
    """The backend of this rank; raises UserError when CuPy or a GPU is missing."""
    return CupyBackend(problem, workdir, local_rank)
