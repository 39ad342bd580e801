"""What every GPU backend shares: one GPU per rank, its data, measuring, and timing again.

A platform implements the hooks of platform.py: device, memory, streams, loading, launching.
The rest is here: choosing the device, uploads, verifying, timing, racing, throttling, NVML,
and what a failure means. The hooks import the platform's library once a backend is created.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from mpitune.backends.base import Backend, Compiled, Compiler, Draft, interleaved, timed_launches, unlaunched
from mpitune.backends.gpu import throttling
from mpitune.backends.gpu.failures import (
    DeviceLostError,
    Failure,
    context_lost,
    describe,
    launch_limits,
    library_text,
    select_device,
)
from mpitune.backends.gpu.geometry import Geometry
from mpitune.backends.gpu.loading import Loaded, Loader
from mpitune.backends.gpu.platform import Check, Event, Platform
from mpitune.errors import UserError
from mpitune.model.judging.racing import Race
from mpitune.model.problem import Kernel
from mpitune.model.result import Result, Status
from mpitune.model.timeline import Timeline
from mpitune.model.work import Launch, Retime, Work

log = logging.getLogger(__name__)


class GpuBackend(Backend, Platform):
    """One GPU, chosen by this rank's place on its node.

    Arguments and answers are uploaded once, in ``prepare``. Each configuration is compiled
    (here or ahead), loaded, and run once on freshly reset outputs. That launch is verified on
    the GPU and is the warm-up: there is no other. Then it is timed ``iterations`` times with
    events on the backend's own stream. With a race each timed launch is waited for and
    checked, and a clearly slower configuration stops early (model/judging/racing.py). By the
    default rule it may stop on its verified launch; no throttle watch then. An NVML observer
    then adds its window of launches, except to a raced configuration.
    """

    PLATFORM = "CUDA"  # what messages call the GPU's programming interface
    VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"  # the variable that hides GPUs from a process

    def __init__(self, problem: Kernel, workdir: str, local_rank: int):
        self.problem = problem
        self.workdir = workdir
        self.fatal_error = ""  # set once the context is lost; run() then refuses
        self.device_id = self._open_device(local_rank)
        facts = self._device_facts()
        self.device_name, self.device_uuid, self.device_pci_bus_id = facts.name, facts.uuid, facts.pci_bus_id
        self.device_detail = f"GPU {self.device_id}, PCI {self.device_pci_bus_id}, {self.device_uuid}"
        self.geometry = Geometry(tuple(problem.problem_size), problem.grid_div, tuple(problem.block_size_names))
        self._compiler = self._make_compiler(local_rank)
        self._observer: Any = problem.observers[0] if problem.observers else None
        self._sampler: Any = None
        self._clocks: Any = None
        self._throttle: Any = None
        self._open_nvml()
        self._args: tuple = ()
        self._pristine: list = []
        self._check: Check | None = None
        self._constants: dict = {}  # cmem_args on the GPU, copied into each module's symbols
        self._loader = Loader(self.geometry, self._load_kernel, self._is_sticky, self._lose_context)
        log.info(
            "GPU %d of this node: %s (%s, PCI %s)",
            self.device_id,
            self.device_name,
            self.device_uuid,
            self.device_pci_bus_id,
        )

    def _open_device(self, rank: int) -> int:
        """The GPU of this rank's place among the ranks of its node, modulo the visible GPUs.

        The place is the MPI library's count of the ranks that share the node.
        """
        try:
            count = self._device_count()
        except Exception as exc:
            raise UserError(f"no usable {self.PLATFORM} GPU on this node ({library_text(exc)})") from None
        if count < 1:
            raise UserError(f"no {self.PLATFORM} GPU visible to this process (check {self.VISIBLE_DEVICES})")
        device_id = select_device(rank, count)
        if rank >= count:
            log.warning(
                "local rank %d but only %d GPU(s) visible: GPU %d is shared and its timings will interfere",
                rank,
                count,
                device_id,
            )
        log.debug("local rank %d -> GPU %d of %d", rank, device_id, count)
        self._use_device(device_id)
        return device_id

    def _open_nvml(self) -> None:
        """Put back GPU settings a crashed run left changed, then open what the spec asks NVML for.

        That is a power sampler, clock and power-limit control, and the throttle watch.
        """
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

    def compiler(self) -> Compiler:
        return self._compiler

    # -- once per run ----------------------------------------------------------------

    def prepare(self) -> None:
        """Upload the arguments, pristine copies of them and the answers, once per run."""
        self.stream: Any = self._new_stream()  # a Stream; a platform's own has more
        n = self.problem.iterations
        self._starts: list[Event] = [self._new_event() for _ in range(n)]
        self._ends: list[Event] = [self._new_event() for _ in range(n)]
        try:
            with self.stream:
                given = self.problem.arguments
                self._pristine = [self._upload(a) if isinstance(a, np.ndarray) else None for a in given]
                self._args = tuple(self._empty_like(p) if p is not None else a for p, a in zip(self._pristine, given))
                answers = (
                    None
                    if self.problem.answer is None
                    else [None if a is None else self._upload(a) for a in self.problem.answer]
                )
                if self.problem.extras:
                    self._constants = {k: self._upload(v) for k, v in self.problem.extras.cmem.items()}
                self._after_upload()
                self._check = self._make_check(answers)
                self._check.warm_up(self._args)
            self.stream.synchronize()
            if self._clocks is not None:  # no permission: one line now, before anything is measured
                self._clocks.apply({k: v[0] for k, v in self.problem.tune_params.items()})
        except self._out_of_memory() as exc:
            raise UserError(f"the arguments and answers do not fit on {self.device_name}: {exc}") from None

    def close(self) -> None:
        """Free device memory; after a lost context only drop the references."""
        try:
            if not self.fatal_error and self._args:
                self.stream.synchronize()
        except Exception:  # closing must never hide the error that ended the run
            log.debug("synchronising on close failed", exc_info=True)
        self._args, self._pristine, self._check = (), [], None
        self._constants = {}
        for nvml in (self._clocks, self._sampler, self._throttle):  # the clocks go back to what they were
            if nvml is not None:
                nvml.close()
        self._free_memory()

    # -- once per configuration ------------------------------------------------------

    def run(self, work: Work, timeline: Timeline, compiled: Compiled | None = None, race: Race | None = None) -> Result:
        if self.fatal_error:
            raise DeviceLostError(self.fatal_error)
        config_id = work.config_id
        draft = Draft(config_id)
        ahead_s = 0.0 if compiled is None else compiled.compile_s  # spent elsewhere, before this
        with timeline.phase("compile", config_id) as t:
            if compiled is None:
                compiled = self._compiler(work)
            kernel, error = (None, compiled.error) if compiled.status else self._loader.kernel(compiled)
        draft.compile_s = ahead_s + t.elapsed_s
        if kernel is None:
            draft.fail(compiled.status or (Status.RUNTIME_ERROR if self.fatal_error else Status.COMPILE_ERROR), error)
            return draft.result()
        loaded = self._loader.placed(work, kernel)  # computable: it compiled
        try:
            if self._clocks is not None:
                self._clocks.apply(work.config)
            self._measure(loaded, draft, timeline, race)
            if self._observer is not None and draft.ok and not draft.raced:
                with timeline.phase("benchmark", config_id) as t:
                    draft.observed = self._observe(loaded, draft.time_ms)
                draft.benchmark_s += t.elapsed_s
        except UserError as exc:  # NVML refused a setting it accepted before
            draft.fail(Status.RUNTIME_ERROR, str(exc))
        finally:
            del kernel, loaded  # the last references to its module, which unloads it
        return draft.result()

    # -- the best candidates timed again (confirmation, calibration) ---------------------

    def retime(
        self,
        retime: Retime,
        timeline: Timeline,
        compiled: Mapping[int, Compiled] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> list[Launch]:
        """``Backend.retime`` through the steps ``run`` takes, so a candidate launches as searched.

        Compile what was not compiled ahead, and load every candidate. Warm each up once on
        freshly reset arguments. Then time them interleaved, each launch between its own pair
        of events. A lost context ends it: NaN for the rest.
        """
        if self.fatal_error:
            return unlaunched(retime)
        ready = dict(compiled or {})
        for work in retime.work:
            if work.config_id not in ready:
                with timeline.phase("compile", work.config_id):
                    ready[work.config_id] = self._compiler(work)
        with timeline.phase(retime.phase):
            start, end = self._new_event(), self._new_event()  # while the context is known good
            loaded = [self._loader.candidate(work, ready[work.config_id], self.fatal_error) for work in retime.work]
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
                    self._launch(candidate)
                    end.record(self.stream)
                    end.synchronize()
                    return self._elapsed_ms(start, end)
                except Exception as exc:
                    self._fail(candidate, exc)
                    loaded[i] = None
                    return math.nan

            try:
                return interleaved(retime.ids, retime.rounds, launch_ms, stopping)
            finally:
                loaded.clear()  # the last references to the modules, which unloads them

    def _apply(self, candidate: Loaded) -> None:
        """Its NVML settings, where clocks or power limits are tuned; a no-op where in force."""
        if self._clocks is not None:
            self._clocks.apply(candidate.work.config)

    def _warm_up(self, candidate: Loaded) -> bool:
        """One untimed launch on freshly reset arguments, as ``run``'s verified launch is.

        Nothing is compared: the search verified it. False when it failed, or the context is gone.
        """
        if self.fatal_error:
            return False
        try:
            self._apply(candidate)
            self._fresh_launch(candidate)
            return True
        except Exception as exc:
            self._fail(candidate, exc)
            return False

    def _fail(self, candidate: Loaded, exc: Exception) -> None:
        """Classify the failure as ``run`` does; a lost context sets the backend's fatal error."""
        status, error = self._failure(exc, candidate, "confirmation")
        log.warning("configuration %d failed while re-timed (%s): %s", candidate.work.config_id, status, error)

    # -- a configuration's steps ------------------------------------------------------

    def _observe(self, loaded: Loaded, time_ms: float) -> dict[str, float]:
        """Power, energy, clocks and temperature over launches that fill the observer's window.

        NVML refreshes too seldom to see a few iterations. Empty, with a warning, when NVML
        fails: the timing stands.
        """
        launches = self._observer.launches(time_ms)
        try:
            self._sampler.start()
            for _ in range(launches):
                self._launch(loaded)
            self.stream.synchronize()
            return self._observer.values(self._sampler.stop(), launches)
        except Exception as exc:
            log.warning("NVML observation failed: %s", exc)
            return {}

    def _measure(self, loaded: Loaded, draft: Draft, timeline: Timeline, race: Race | None) -> None:
        """Verify (also the warm-up), then time; any failure becomes the result's status."""
        phase, failure, raced = "verify", None, False
        times: list[float] = []
        with timeline.phase("verify", draft.config_id) as t:
            try:
                draft.error, draft.first_ms = self._verify(loaded)
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
                            (self._benchmark(loaded), False)
                            if race is None
                            else self._race(loaded, race, draft.first_ms)
                        ),
                        draft,
                    )
                except Exception as exc:
                    failure = exc
            draft.benchmark_s = t.elapsed_s
        if failure is not None:
            draft.fail(*self._failure(failure, loaded, phase))
            return
        draft.set_times(times, raced)

    def _verify(self, loaded: Loaded) -> tuple[str, float]:
        """Run once on reset arrays (also the warm-up) and compare on the GPU.

        Returns:
            What differs ('' if nothing), and the launch's time in ms.
        """
        first_ms = self._fresh_launch(loaded)
        if self.keep_outputs:
            self.outputs = [self._to_host(a) if p is not None else a for a, p in zip(self._args, self._pristine)]
        assert self._check is not None, "prepare() uploads the answers before any run"
        return self._check.mismatch(self._args), first_ms

    def _fresh_launch(self, loaded: Loaded) -> float:
        """Reset every array, launch once and wait: a kernel's first launch, also its warm-up.

        Returns its time in ms, between events around the launch alone (not the resets).
        """
        self._grant_shared_memory(loaded)
        for dst, src in zip(self._args, self._pristine):
            if src is not None and src.nbytes:
                self._reset(dst, src)
        start, end = self._starts[0], self._ends[0]
        start.record(self.stream)
        self._launch(loaded)
        end.record(self.stream)
        self.stream.synchronize()
        return self._elapsed_ms(start, end)

    def _benchmark(self, loaded: Loaded) -> list[float]:
        """Every iteration between its own pair of events; one host sync at the end."""
        for start, end in zip(self._starts, self._ends):
            start.record(self.stream)
            self._launch(loaded)
            end.record(self.stream)
        self._ends[-1].synchronize()
        return [self._elapsed_ms(s, e) for s, e in zip(self._starts, self._ends)]

    def _race(self, loaded: Loaded, race: Race, first_ms: float) -> tuple[list[float], bool]:
        """As ``_benchmark``, each launch waited for (a host round trip), so that a race may stop it."""
        start, end = self._starts[0], self._ends[0]

        def launch_ms() -> float:
            start.record(self.stream)
            self._launch(loaded)
            end.record(self.stream)
            end.synchronize()
            return self._elapsed_ms(start, end)

        return timed_launches(launch_ms, self.problem.iterations, race, first_ms)

    # -- failures --------------------------------------------------------------------

    def _failure(self, exc: Exception, loaded: Loaded, phase: str) -> tuple[Status, str]:
        """Status and message of an exception while running a configuration."""
        failure = self._classify(exc)
        if failure is Failure.CONTEXT_LOST:
            self._lose_context(exc, f"the {phase} run")
            return failure.status, self.fatal_error
        if failure is Failure.LAUNCH:
            limits = launch_limits(loaded.grid, loaded.block, loaded.smem_bytes, self._kernel_limits(loaded.kernel))
            return failure.status, f"{describe(exc)} ({limits})"
        return failure.status, describe(exc)

    def _lose_context(self, exc: BaseException, where: str) -> str:
        """Mark the context lost, so that every later ``run`` refuses; the error it records."""
        self.fatal_error = context_lost(f"GPU {self.device_id} ({self.device_name})", where, exc, self.PLATFORM)
        log.error("%s", self.fatal_error)
        return self.fatal_error
