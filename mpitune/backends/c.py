"""C kernels on the CPU: gcc builds a shared library per configuration, ctypes calls it.

This backend exists so that everything except the GPU (spec, scheduling, cache,
strategies) runs for real on machines without one. The kernel is ``void kernel_name(...)``;
every tunable parameter becomes ``-DNAME=value``.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.backends.base import Backend, Compiled, Compiler, Draft, interleaved, shorten, timed, timed_launches
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.backends.compare import mismatch
from mpitune.backends.kernel_cache import cached
from mpitune.model.judging.racing import Race
from mpitune.model.problem import Kernel
from mpitune.model.result import Result, Status
from mpitune.model.timeline import Timeline
from mpitune.model.work import Launch, Retime, Work

log = logging.getLogger(__name__)

_SCALARS: dict[np.dtype, type] = {
    np.dtype(np.int8): ctypes.c_int8,
    np.dtype(np.int16): ctypes.c_int16,
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.int64): ctypes.c_int64,
    np.dtype(np.uint8): ctypes.c_uint8,
    np.dtype(np.uint16): ctypes.c_uint16,
    np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.float32): ctypes.c_float,
    np.dtype(np.float64): ctypes.c_double,
    np.dtype(np.bool_): ctypes.c_bool,
}
CAPABILITIES = Capabilities(
    lang="C",
    aliases=(),
    module="c",
    device=DeviceKind.CPU,
    scalar_dtypes=frozenset(dtype.str for dtype in _SCALARS),
)
DEFAULT_FLAGS = ["-O3", "-fPIC", "-shared"]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def define(name: str, value) -> str:
    if isinstance(value, bool):
        value = int(value)
    return f"-D{name}={value}"


@dataclass(frozen=True)
class GccCompiler:
    """Builds one configuration's shared library; picklable, so any process can run it."""

    command: tuple[str, ...]  # the compiler and the problem's options
    source_path: str
    workdir: str

    def __call__(self, work: Work) -> Compiled:
        return timed(lambda: self._build(work))

    def _build(self, work: Work) -> Compiled:
        config_id, lib = work.config_id, self.image_path(work)
        cmd = [*self.command, *self._defines(work), "-o", lib, self.source_path]
        proc = run_compiler(cmd)
        if proc.returncode != 0:
            return Compiled(
                config_id,
                status=Status.COMPILE_ERROR,
                error=shorten(proc.stderr or f"{cmd[0]} exited with {proc.returncode}"),
            )
        return Compiled(config_id, artifact=lib)

    @staticmethod
    def _defines(work: Work) -> list[str]:
        derived = work.derived
        defines = work.config if derived is None or derived.defines is None else derived.defines
        return [define(k, v) for k, v in defines.items()]

    def image_path(self, work: Work) -> str:
        return os.path.join(self.workdir, f"config{work.config_id}.so")

    def cache_key(self, work: Work) -> tuple[str | bytes, ...] | None:
        """The command and the defines as gcc gets them, and the source as the file gcc reads has it.

        That file is the run's own copy, which ``prepare`` writes. The paths of the run's working
        folder are no part of it: they differ from run to run and do not change the library.
        """
        try:
            with open(self.source_path, "rb") as fh:
                source = fh.read()
        except OSError:  # gcc will say what is wrong
            return None
        return ("C", *self.command, *self._defines(work), source)


def gcc_identity(command: Sequence[str]) -> str | None:
    """What the compiler is, for the kernel cache's key; None when it cannot say.

    That is its resolved path and its ``--version``, and what the library is built for: this
    machine's architecture and CPU model. An option such as ``-march=native`` makes the library
    the CPU's own.
    """
    found = shutil.which(command[0])
    if found is None:
        return None
    try:
        proc = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return "\n".join((os.path.realpath(found), proc.stdout.strip(), platform.machine(), cpu_name()))


def run_compiler(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run the compiler in a process group of its own, which ends with the process that started it.

    The worker's deadline ends a compile that hangs (an ``#include`` of a FIFO) with SIGKILL.
    That leaves no chance to clean up: gcc, and the cc1 and as it started, would live on. So a
    small shell starts the compiler beside a watcher. The watcher holds the read end of a pipe;
    only this process holds its write end. Once this process is gone, killed or exiting, the
    read sees end-of-file. The watcher then kills the whole group.
    """
    read, write = os.pipe()
    guard = (
        'exec 3<&0 </dev/null; "$@" 3<&- & c=$!; (read _ <&3; kill -KILL 0) >/dev/null 2>&1 & w=$!; '
        "exec 3<&-; wait $c; rc=$?; kill $w 2>/dev/null; exit $rc"
    )
    try:  # the pipe is the shell's standard input, which only the watcher keeps
        proc = subprocess.Popen(
            ["/bin/sh", "-c", guard, "sh", *cmd],
            stdin=read,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    finally:
        os.close(read)
    try:
        out, err = proc.communicate()
    finally:
        os.close(write)
        if proc.poll() is None:  # interrupted here (an exception): end the group now
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


class CBackend(Backend):
    def __init__(self, problem: Kernel, workdir: str, local_rank: int = 0):
        self.problem = problem
        self.workdir = workdir
        self.device_name = cpu_name()
        self.source_path = os.path.join(workdir, "kernel.c")
        self.argtypes = [ctypes.c_void_p if isinstance(a, np.ndarray) else _SCALARS[a.dtype] for a in problem.arguments]
        command = shlex.split(os.environ.get("CC", "gcc")) + DEFAULT_FLAGS + list(problem.compiler_options)
        self._compiler = cached(
            GccCompiler(tuple(command), self.source_path, workdir), lambda: gcc_identity(command), local_rank
        )

    def prepare(self) -> None:
        with open(self.source_path, "w", encoding="utf-8") as fh:
            fh.write(self.problem.kernel_source)

    def compiler(self) -> Compiler:
        return self._compiler

    def _call_args(self, arrays: list) -> list:
        return [
            ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else ctype(a.item())
            for a, ctype in zip(arrays, self.argtypes)
        ]

    def run(self, work: Work, timeline: Timeline, compiled: Compiled | None = None, race: Race | None = None) -> Result:
        draft = Draft(work.config_id)
        ahead_s = 0.0 if compiled is None else compiled.compile_s  # spent elsewhere, before this
        with timeline.phase("compile", work.config_id) as t:
            if compiled is None:
                compiled = self._compiler(work)
            lib, fn, why = self._load(compiled)
        draft.compile_s = ahead_s + t.elapsed_s
        if fn is None:
            _unload(lib)
            draft.fail(Status.COMPILE_ERROR, why)
            return draft.result()
        try:
            self._verify_and_time(fn, draft, timeline, race)
        finally:
            _unload(lib)
        return draft.result()

    def _load(self, compiled: Compiled) -> tuple[ctypes.CDLL | None, Any, str]:
        """(library, kernel, '') or (library or None, None, why). The library file is unlinked
        once loaded (or found unloadable): the loaded copy is all that is needed."""
        if not compiled.artifact:
            return None, None, compiled.error
        lib = None
        try:
            lib = ctypes.CDLL(os.fsdecode(compiled.artifact))
            fn = getattr(lib, self.problem.kernel_name)
        except (OSError, AttributeError) as exc:
            return lib, None, f"cannot load {self.problem.kernel_name}: {exc}"
        finally:
            _remove(compiled)
        fn.argtypes, fn.restype = self.argtypes, None
        return lib, fn, ""

    def _fresh_arrays(self) -> list:
        """Copies of the arguments: a configuration that writes nothing cannot pass on the
        output a previous configuration left behind."""
        return [a.copy() for a in self.problem.arguments]

    def retime(
        self,
        retime: Retime,
        timeline: Timeline,
        compiled: Mapping[int, Compiled] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> list[Launch]:
        """All candidates loaded at once (one library each), each warmed up once, then timed in
        turn, all on one fresh copy of the arguments (see ``Backend.retime``). The candidates
        not compiled ahead are compiled side by side: no kernel runs meanwhile to be disturbed."""
        ready = dict(compiled or {})
        libs: list[ctypes.CDLL] = []
        try:
            missing = [w for w in retime.work if w.config_id not in ready]
            if missing:
                with timeline.phase("compile"), ThreadPoolExecutor(min(len(missing), os.cpu_count() or 1)) as pool:
                    ready.update(zip((w.config_id for w in missing), pool.map(self._compiler, missing)))
            with timeline.phase(retime.phase):
                fns = []
                for work in retime.work:
                    lib, fn, why = self._load(ready[work.config_id])
                    if lib is not None:
                        libs.append(lib)
                    if fn is None:
                        log.warning("configuration %d cannot be re-timed: %s", work.config_id, why)
                    fns.append(fn)
                return self._confirm(retime, fns, stopping)
        finally:
            for lib in libs:
                _unload(lib)
            for work in retime.work:  # those not loaded (a failure before their turn)
                if work.config_id in ready:
                    _remove(ready[work.config_id])

    def _confirm(self, retime: Retime, fns: list, stopping: Callable[[], bool] | None) -> list[Launch]:
        """The warm-ups, then the interleaved rounds.

        A candidate that cannot be loaded, or whose warm-up raises, is launched no more (ctypes
        turns some faults into exceptions). They share one copy of the arguments, as the timed
        launches of one configuration do in the search. A copy per candidate would give each
        launch caches that the others' data filled.
        """
        fresh = self._fresh_arrays()  # alive as long as the pointers into it
        args = self._call_args(fresh)
        warm: list[bool] = []
        for work, fn in zip(retime.work, fns):
            try:
                if fn is not None:
                    fn(*args)
            except Exception as exc:
                log.warning("configuration %d: its warm-up failed while re-timed: %s", work.config_id, exc)
                fn = None
            warm.append(fn is not None)

        def launch_ms(i: int) -> float:
            fn = fns[i]
            if not warm[i]:
                return math.nan
            start = time.perf_counter_ns()
            fn(*args)
            return (time.perf_counter_ns() - start) / 1e6

        return interleaved(retime.ids, retime.rounds, launch_ms, stopping)

    def _verify_and_time(self, fn, draft: Draft, timeline: Timeline, race: Race | None) -> None:
        # Fresh copies of the arguments: a configuration that writes nothing cannot pass
        # on the output a previous configuration left behind. This call is also the warm-up:
        # there is no other untimed launch. It is timed on its own (the call only, not the
        # copies nor the comparison): a race may stop the configuration on it.
        with timeline.phase("verify", draft.config_id) as t:
            arrays = self._fresh_arrays()
            args = self._call_args(arrays)
            try:
                start = time.perf_counter_ns()
                fn(*args)
                draft.first_ms = (time.perf_counter_ns() - start) / 1e6
                if self.keep_outputs:
                    self.outputs = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
                draft.error = mismatch(np, arrays, self.problem.answer, self.problem.atol)
            except Exception as exc:  # ctypes turns some faults into exceptions
                draft.fail(Status.RUNTIME_ERROR, f"{type(exc).__name__}: {exc}")
        draft.verify_s = t.elapsed_s
        if not draft.ok:
            return
        if draft.error:
            draft.status = Status.VERIFY_FAILED
            return

        def launch_ms() -> float:
            start = time.perf_counter_ns()
            fn(*args)
            return (time.perf_counter_ns() - start) / 1e6

        with timeline.phase("benchmark", draft.config_id) as t:
            draft.set_times(*timed_launches(launch_ms, self.problem.iterations, race, draft.first_ms))
        draft.benchmark_s = t.elapsed_s


def _unload(lib) -> None:
    """Each configuration is a new library; without dlclose a long run leaks them all."""
    if lib is not None:
        import _ctypes

        _ctypes.dlclose(lib._handle)


def _remove(compiled: Compiled) -> None:
    """A library's file, once loaded or no longer wanted; gone already is fine."""
    if compiled.artifact:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(compiled.artifact)


def create(kernel: Kernel, workdir: str, local_rank: int = 0) -> Backend:
    """The CPU backend of this rank, with the GPU a GPU backend would take for the record.

    The CPU needs no choosing. But the file records the rank's GPU: its node-local rank within
    CUDA_VISIBLE_DEVICES, as Slurm sets it. So the placement of ranks on nodes and GPUs can be
    checked without a GPU.
    """
    backend = CBackend(kernel, workdir, local_rank)
    backend.device_detail = gpu_placement(local_rank, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return backend


def gpu_placement(local_rank: int, visible: str | None) -> str:
    """'local rank K, GPU G of CUDA_VISIBLE_DEVICES=V': the GPU is the local rank modulo the
    visible ones, as the GPU backends choose (select_device)."""
    devices = [d for d in (visible or "").split(",") if d.strip()]
    if not devices:
        return f"local rank {local_rank}, no CUDA_VISIBLE_DEVICES"
    return f"local rank {local_rank}, GPU {devices[local_rank % len(devices)]} of CUDA_VISIBLE_DEVICES={visible}"
