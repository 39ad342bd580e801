"""The CuPy backend of one rank: its GPU, the data on it, loading and measuring each
configuration, timing the best candidates again, and the NVML observer and clock control of
that GPU.

Longer than 400 lines: one role, measuring on one GPU, whose ``run`` and ``retime`` share their steps.

CuPy is imported only when a backend is created: this module loads on machines without a GPU.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.backends.base import Backend, Compiled, Compiler, Draft, interleaved, shorten, timed_launches, unlaunched
from mpitune.backends.cupy import throttling
from mpitune.backends.cupy.compiling import NvrtcCompiler, nvrtc_identity, nvrtc_options
from mpitune.backends.cupy.device_errors import (
    DeviceLostError,
    Failure,
    FunctionAttribute,
    classify,
    context_lost,
    describe,
    is_sticky,
    kernel_limits,
    launch_limits,
    library_text,
)
from mpitune.backends.cupy.device_start import device_uuid, import_cupy, select_device
from mpitune.backends.cupy.geometry import Dims, block_dims, grid_dims
from mpitune.backends.cupy.verification import GpuCheck
from mpitune.backends.kernel_cache import cached
from mpitune.errors import UserError
from mpitune.model.judging.racing import Race
from mpitune.model.result import Result, Status
from mpitune.model.timeline import Timeline
from mpitune.model.work import Launch, Retime, Work

log = logging.getLogger(__name__)

DEFAULT_SMEM_LIMIT = 48 * 1024  # bytes of dynamic shared memory a launch gets without asking


@dataclass
class Loaded:
    """One candidate ready to launch again: its kernel (which holds its module loaded) and geometry."""

    work: Work
    kernel: Any
    grid: Dims
    block: Dims
    smem_bytes: int


class CupyBackend(Backend):
    """One GPU, chosen by this rank's place on its node.

    Arguments and answers are uploaded once in ``prepare``; each configuration is compiled
    (here or ahead, by ``NvrtcCompiler``), loaded, run once on freshly reset outputs
    (verification, which doubles as the untimed warm-up: there is no other), compared with the
    answers on the GPU, and then timed ``iterations`` times with events on the backend's own
    stream; 1 + ``iterations`` launches in all. With a race (model/judging/racing.py) each timed launch
    is waited for and checked, and a configuration clearly slower than the best stops early; by
    the default rule on its verified launch already (no throttle watch then: nothing timed is
    left to watch). An NVML observer then adds its window of launches, except to a raced one.
    """

    def __init__(self, problem: Any, workdir: str, local_rank: int):
        self.cp = import_cupy()
        self.problem = problem
        self.workdir = workdir
        self.fatal_error = ""  # set once the CUDA context is lost; run() then refuses
        self.device_id = self._open_device(local_rank)
        props = self.cp.cuda.runtime.getDeviceProperties(self.device_id)
        self.device_name = library_text(props.get("name", b"unknown GPU"))
        self.device_uuid = device_uuid(props.get("uuid"))
        self.device_pci_bus_id = self._pci_bus_id()
        self.device_detail = f"GPU {self.device_id}, PCI {self.device_pci_bus_id}, {self.device_uuid}"
        self._compiler = self._make_compiler(local_rank)
        self._observer: Any = problem.observers[0] if problem.observers else None
        self._sampler: Any = None
        self._clocks: Any = None
        self._throttle: Any = None
        self._open_nvml()
        self._args: tuple = ()
        self._pristine: list = []
        self._check: GpuCheck | None = None
        self._constants: dict = {}  # cmem_args on the GPU, copied into each module's symbols
        self._smem_bytes = 0  # dynamic shared memory of the configuration being measured
        self._probe: Any = None
        log.info(
            "GPU %d of this node: %s (%s, PCI %s)",
            self.device_id,
            self.device_name,
            self.device_uuid,
            self.device_pci_bus_id,
        )

    def _open_device(self, rank: int) -> int:
        """The GPU of this rank's place among the ranks of its node (the MPI library's count of
        ranks sharing the node), modulo the GPUs it can see."""
        cp = self.cp
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:
            raise UserError(f"no usable CUDA GPU on this node ({library_text(exc)})") from None
        if count < 1:
            raise UserError("no CUDA GPU visible to this process (check CUDA_VISIBLE_DEVICES)")
        device_id = select_device(rank, count)
        if rank >= count:
            log.warning(
                "local rank %d but only %d GPU(s) visible: GPU %d is shared and its timings will interfere",
                rank,
                count,
                device_id,
            )
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
        from mpitune.observers.throttle import ThrottleWatch

        restore_path = restore_file.path_for(self.problem.cache_path or "mpitune", self.device_pci_bus_id)
        recover(restore_path)
        if any(name in self.problem.tune_params for name in TUNABLES):
            self._clocks = ClockControl(self.device_pci_bus_id, self.problem.tune_params, restore_path)
        if self._observer is not None:
            self._sampler = PowerSampler(self.device_pci_bus_id)
        self._throttle = ThrottleWatch.open(self.device_pci_bus_id)  # None without NVML: timed unwatched

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

    def compiler(self) -> Compiler:
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
                self._pristine = [cp.asarray(a) if isinstance(a, np.ndarray) else None for a in self.problem.arguments]
                self._args = tuple(
                    cp.empty_like(p) if p is not None else a for p, a in zip(self._pristine, self.problem.arguments)
                )
                answers = (
                    None
                    if self.problem.answer is None
                    else [None if a is None else cp.asarray(a) for a in self.problem.answer]
                )
                if self.problem.extras:
                    self._constants = {k: cp.asarray(v) for k, v in self.problem.extras.cmem.items()}
                self._probe = cp.full(1, 42, dtype=np.int32)
                self._check = GpuCheck(cp, self.stream, answers, self.problem.atol)
                self._check.warm_up(self._args)
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
        self._args, self._pristine, self._check, self._probe = (), [], None, None
        self._constants = {}
        for nvml in (self._clocks, self._sampler, self._throttle):  # the clocks go back to what they were
            if nvml is not None:
                nvml.close()
        try:
            self.cp.get_default_memory_pool().free_all_blocks()
        except Exception:
            log.debug("freeing the memory pool failed", exc_info=True)

    # -- once per configuration ------------------------------------------------------

    def run(self, work: Work, timeline: Timeline, compiled: Compiled | None = None, race: Race | None = None) -> Result:
        if self.fatal_error:
            raise DeviceLostError(self.fatal_error)
        config_id, config = work.config_id, work.config
        draft = Draft(config_id)
        ahead_s = 0.0 if compiled is None else compiled.compile_s  # spent elsewhere, before this
        with timeline.phase("compile", config_id) as t:
            if compiled is None:
                compiled = self._compiler(work)
            kernel, error = (None, compiled.error) if compiled.status else self._load(compiled)
        draft.compile_s = ahead_s + t.elapsed_s
        if kernel is None:
            draft.fail(compiled.status or (Status.RUNTIME_ERROR if self.fatal_error else Status.COMPILE_ERROR), error)
            return draft.result()
        block = block_dims(config, self.problem.block_size_names)  # computable: it compiled
        grid = grid_dims(self.problem.problem_size, config, self.problem.grid_div, self.problem.block_size_names)
        self._smem_bytes = work.derived.smem_bytes if work.derived else 0
        try:
            if self._clocks is not None:
                self._clocks.apply(config)
            self._measure(kernel, grid, block, draft, timeline, race)
            if self._observer is not None and draft.ok and not draft.raced:
                with timeline.phase("benchmark", config_id) as t:
                    draft.observed = self._observe(kernel, grid, block, draft.time_ms)
                draft.benchmark_s += t.elapsed_s
        except UserError as exc:  # NVML refused a setting it accepted before
            draft.fail(Status.RUNTIME_ERROR, str(exc))
        finally:
            del kernel  # the last reference to its module, which unloads it
        return draft.result()

    # -- the best candidates timed again (confirmation, calibration) ---------------------

    def retime(
        self,
        retime: Retime,
        timeline: Timeline,
        compiled: Mapping[int, Compiled] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> list[Launch]:
        """``Backend.retime`` through the steps ``run`` takes (loading, geometry, the launch, the
        failures), so that a candidate is launched as the search measured it: compile what was
        not compiled ahead, load every candidate, warm each up once on freshly reset arguments,
        then time them interleaved, each launch between its own pair of events. A lost context
        ends it: NaN for the rest."""
        if self.fatal_error:
            return unlaunched(retime)
        ready = dict(compiled or {})
        for work in retime.work:
            if work.config_id not in ready:
                with timeline.phase("compile", work.config_id):
                    ready[work.config_id] = self._compiler(work)
        with timeline.phase(retime.phase):
            start, end = self.cp.cuda.Event(), self.cp.cuda.Event()  # while the context is known good
            loaded = [self._load_candidate(work, ready[work.config_id]) for work in retime.work]
            for i, candidate in enumerate(loaded):
                if candidate is not None and not self._warm_up(candidate):
                    loaded[i] = None

            def launch_ms(i: int) -> float:
                candidate = loaded[i]
                if candidate is None or self.fatal_error:
                    return math.nan
                try:
                    self._apply(candidate)
                    start.record(self.stream)
                    self._launch(candidate.kernel, candidate.grid, candidate.block)
                    end.record(self.stream)
                    end.synchronize()
                    return float(self.cp.cuda.get_elapsed_time(start, end))
                except Exception as exc:
                    self._fail(candidate, exc)
                    loaded[i] = None
                    return math.nan

            try:
                return interleaved(retime.ids, retime.rounds, launch_ms, stopping)
            finally:
                loaded.clear()  # the last references to the modules, which unloads them

    def _load_candidate(self, work: Work, compiled: Compiled) -> Loaded | None:
        """The candidate's kernel and geometry, as ``run`` computes them; None when it cannot be
        loaded (or the context is gone)."""
        if compiled.status or self.fatal_error:
            log.warning("configuration %d cannot be re-timed: %s", work.config_id, compiled.error or self.fatal_error)
            return None
        kernel, error = self._load(compiled)
        if kernel is None:
            log.warning("configuration %d cannot be re-timed: %s", work.config_id, error)
            return None
        names = self.problem.block_size_names
        try:
            block = block_dims(work.config, names)
            grid = grid_dims(self.problem.problem_size, work.config, self.problem.grid_div, names)
        except Exception as exc:  # computable for any configuration the search measured
            log.warning("configuration %d cannot be re-timed: %s", work.config_id, exc)
            return None
        return Loaded(work, kernel, grid, block, work.derived.smem_bytes if work.derived else 0)

    def _apply(self, candidate: Loaded) -> None:
        """What the launch of this candidate needs set: its dynamic shared memory and, when clocks
        or power limits are tuned, its NVML settings (a no-op where they are in force already)."""
        self._smem_bytes = candidate.smem_bytes
        if self._clocks is not None:
            self._clocks.apply(candidate.work.config)

    def _warm_up(self, candidate: Loaded) -> bool:
        """One untimed launch on freshly reset arguments, as ``run``'s verification launch is (but
        nothing is compared: the search verified it). False when it failed, or the context is gone."""
        if self.fatal_error:
            return False
        try:
            self._apply(candidate)
            self._fresh_launch(candidate.kernel, candidate.grid, candidate.block)
            return True
        except Exception as exc:
            self._fail(candidate, exc)
            return False

    def _fail(self, candidate: Loaded, exc: Exception) -> None:
        """Classify the failure as ``run`` does; a lost context sets the backend's fatal error."""
        status, error = self._failure(exc, candidate.kernel, candidate.grid, candidate.block, "confirmation")
        log.warning("configuration %d failed while re-timed (%s): %s", candidate.work.config_id, status, error)

    # -- a configuration's steps ------------------------------------------------------

    def _observe(self, kernel: Any, grid: Dims, block: Dims, time_ms: float) -> dict[str, float]:
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

    def _load(self, compiled: Compiled) -> tuple[Any, str]:
        """(kernel, '') or (None, why): the loader's complaint (ptxas limits of a PTX image,
        a missing symbol). Fills the module's constant memory from cmem_args."""
        from cupy.cuda import function

        try:
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
            return kernel, ""
        except Exception as exc:
            if is_sticky(exc):
                self._lose_context(exc, "loading the module")
                return None, self.fatal_error
            return None, shorten(describe(exc))

    def _measure(
        self, kernel: Any, grid: Dims, block: Dims, draft: Draft, timeline: Timeline, race: Race | None
    ) -> None:
        """Verify (also the warm-up), then time; any failure becomes the result's status."""
        phase, failure, raced = "verify", None, False
        times: list[float] = []
        with timeline.phase("verify", draft.config_id) as t:
            try:
                draft.error, draft.first_ms = self._verify(kernel, grid, block)
            except Exception as exc:
                failure = exc
        draft.verify_s = t.elapsed_s
        if failure is None and draft.error:
            draft.status = Status.VERIFY_FAILED
            return
        if failure is None and race is not None and race.lost_first(draft.first_ms):
            return draft.set_times([draft.first_ms], True)  # no timed launch: nothing for the throttle watch
        if failure is None:
            phase = "benchmark"
            with timeline.phase("benchmark", draft.config_id) as t:
                try:
                    times, raced = throttling.watched(
                        self._throttle,
                        lambda: (
                            (self._benchmark(kernel, grid, block), False)
                            if race is None
                            else self._race(kernel, grid, block, race, draft.first_ms)
                        ),
                        draft,
                    )
                except Exception as exc:
                    failure = exc
            draft.benchmark_s = t.elapsed_s
        if failure is not None:
            draft.fail(*self._failure(failure, kernel, grid, block, phase))
            return
        draft.set_times(times, raced)

    def _launch(self, kernel: Any, grid: Dims, block: Dims) -> None:
        kernel(grid, block, self._args, shared_mem=self._smem_bytes, stream=self.stream)

    def _verify(self, kernel: Any, grid: Dims, block: Dims) -> tuple[str, float]:
        """Run once on reset arrays (this is also the warm-up) and compare on the GPU: (what
        differs, '' if nothing; the launch's time in ms)."""
        first_ms = self._fresh_launch(kernel, grid, block)
        if self.keep_outputs:
            self.outputs = [self.cp.asnumpy(a) if p is not None else a for a, p in zip(self._args, self._pristine)]
        assert self._check is not None, "prepare() uploads the answers before any run"
        return self._check.mismatch(self._args), first_ms

    def _fresh_launch(self, kernel: Any, grid: Dims, block: Dims) -> float:
        """Reset every array, launch once and wait: a kernel's first launch, the one that also
        warms it up; its time in ms, between events around the launch alone (the copies before
        it are not in it). Beyond 48 KiB, dynamic shared memory must be asked for, once per
        kernel, first."""
        if self._smem_bytes > DEFAULT_SMEM_LIMIT:
            self.cp.cuda.driver.funcSetAttribute(
                kernel.ptr, FunctionAttribute.MAX_DYNAMIC_SHARED_BYTES, self._smem_bytes
            )
        for dst, src in zip(self._args, self._pristine):
            if src is not None and src.nbytes:
                dst.data.copy_from_device_async(src.data, src.nbytes, self.stream)
        start, end = self._starts[0], self._ends[0]
        start.record(self.stream)
        self._launch(kernel, grid, block)
        end.record(self.stream)
        self.stream.synchronize()
        return float(self.cp.cuda.get_elapsed_time(start, end))

    def _benchmark(self, kernel: Any, grid: Dims, block: Dims) -> list[float]:
        """Every iteration between its own pair of events; one host sync at the end."""
        for start, end in zip(self._starts, self._ends):
            start.record(self.stream)
            self._launch(kernel, grid, block)
            end.record(self.stream)
        self._ends[-1].synchronize()
        return [float(self.cp.cuda.get_elapsed_time(s, e)) for s, e in zip(self._starts, self._ends)]

    def _race(self, kernel: Any, grid: Dims, block: Dims, race: Race, first_ms: float) -> tuple[list[float], bool]:
        """As ``_benchmark``, but each launch is waited for (one host round trip, some microseconds)
        so that the race can stop the configuration before its next launch."""
        start, end = self._starts[0], self._ends[0]

        def launch_ms() -> float:
            start.record(self.stream)
            self._launch(kernel, grid, block)
            end.record(self.stream)
            end.synchronize()
            return float(self.cp.cuda.get_elapsed_time(start, end))

        return timed_launches(launch_ms, self.problem.iterations, race, first_ms)

    # -- failures --------------------------------------------------------------------

    def _failure(self, exc: Exception, kernel: Any, grid: Dims, block: Dims, phase: str) -> tuple[Status, str]:
        """Status and message of an exception while running a configuration."""
        failure = classify(exc, self._context_ok)
        if failure is Failure.CONTEXT_LOST:
            self._lose_context(exc, f"the {phase} run")
            return failure.status, self.fatal_error
        if failure is Failure.LAUNCH:
            limits = launch_limits(grid, block, self._smem_bytes, kernel_limits(self.cp, kernel))
            return failure.status, f"{describe(exc)} ({limits})"
        return failure.status, describe(exc)

    def _context_ok(self) -> bool:
        """A tiny round trip: a lost context fails it even when the first error looked mild."""
        try:
            self.cp.cuda.runtime.deviceSynchronize()
            return int(self._probe.get()[0]) == 42
        except Exception:
            return False

    def _lose_context(self, exc: Exception, where: str) -> None:
        self.fatal_error = context_lost(f"GPU {self.device_id} ({self.device_name})", where, exc)
        log.error("%s", self.fatal_error)
