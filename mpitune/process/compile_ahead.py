"""Compiling configurations ahead of the device, in a pool of processes per rank.

NVRTC takes hundreds of milliseconds per configuration where timing it takes a few. A tuning
node has many cores per GPU. So each rank hands the configurations of its chunk to compile
workers as soon as it gets them. Where the strategy can say its next chunk in advance, that
goes too. The device measures them in order as they come out. The workers compile to an image
in memory (a cubin) and never touch the GPU. Only the measuring process uses the device or its
stream.

The rank waits for a compile only when the pool has fallen behind. That wait is the rank's
``compile`` phase. The compile itself runs in the background. It is recorded as phase
``compile_ahead``, on the same clock. It overlaps the rank's other phases. So it is kept out of
the rank's wall-time accounting (timeline.BACKGROUND_PHASES).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from multiprocessing.queues import Queue
from typing import Protocol

from mpitune.backends.base import Compiled, Compiler
from mpitune.model.result import Status
from mpitune.model.timeline import Clock, PhaseRow
from mpitune.model.work import Work
from mpitune.process.supervisor import SPAWN, Death, Hang, Patience, Supervisor

log = logging.getLogger(__name__)

# How much lower a compile worker's priority is than its rank's: compiling ahead is background
# work, and where cores are short the rank, its measuring worker (a kernel's launches are timed
# on the CPU's side too) and, at start-up, the spec that rank 0 loads come first.
NICE = 10


def default_workers(ranks_on_node: int, environ: Mapping[str, str] | None = None, warn: bool = True) -> int:
    """Compile workers for one rank: the cores it was given, less one for itself.

    Slurm says how many cores a task has (``SLURM_CPUS_PER_TASK``). Otherwise the process' CPU
    affinity does. It is shared among the node's ranks when every rank sees the whole machine
    (``mpirun --bind-to none``). A rank bound to a single core gets one worker. It also gets a
    warning unless ``warn`` is off. ``warn`` is off for a guess before MPI; the loop guesses
    again and warns then.
    """
    given = (os.environ if environ is None else environ).get("SLURM_CPUS_PER_TASK", "")
    if given.isdigit() and int(given) > 0:
        cores = int(given)
    else:
        cores = len(os.sched_getaffinity(0))
        if warn and cores == 1 and (os.cpu_count() or 1) > ranks_on_node:
            log.warning(
                "this rank may run on one core only (bound by the launcher): its compile workers "
                "share that core. Start ranks with more cores each (mpirun --bind-to none, or "
                "--map-by slot:PE=N; srun --cpus-per-task=N)"
            )
        if cores >= (os.cpu_count() or cores) and ranks_on_node > 1:
            cores //= ranks_on_node
    return max(1, cores - 1)


class CompilePool(Protocol):
    """What a rank asks of its compile workers.

    They are ``CompileAhead``'s processes, or a replay's workers on its simulated clock
    (simulated_compile.py)."""

    workers: int
    compiler: Compiler | None

    def submit(self, items: Iterable[Work], since_s: float | None = None) -> None: ...
    def keep_only(self, config_ids: Iterable[int]) -> None: ...
    def take(self, work: Work, deadline_s: float | None) -> Compiled: ...
    def row(self, compiled: Compiled, batch: int) -> PhaseRow | None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class CompileTask:
    """One configuration for a compile worker, with the compiler to run it.

    The compiler is known only once the rank's device is."""

    compiler: Compiler
    work: Work


def _serve(tasks: Queue, results: Queue, warm_up: Callable[[], None] | None) -> None:
    """A compile worker: compile what the rank queues, in order, until killed (or orphaned)."""
    if warm_up is not None:
        try:
            warm_up()
        except Exception:  # only a head start: the first real compile reports what is wrong
            log.debug("warming up the compiler failed", exc_info=True)
    while True:
        task: CompileTask = tasks.get()
        try:
            results.put(task.compiler(task.work))
        except Exception as exc:  # a bug or a broken toolchain, not the kernel
            results.put(
                Compiled(
                    task.work.config_id,
                    status=Status.RUNTIME_ERROR,
                    error=f"the compiler failed: {type(exc).__name__}: {exc}",
                )
            )


class CompileAhead:
    """A rank's compile workers and the configurations handed to them, by config id.

    The workers start at once. A rank starts them before its device is ready, which takes
    longer. ``compiler`` is given when known and travels with every task."""

    def __init__(
        self, workers: int, clock: Clock, compiler: Compiler | None = None, warm_up: Callable[[], None] | None = None
    ):
        self.compiler, self.workers, self.clock, self.warm_up = compiler, workers, clock, warm_up
        self._queued: dict[int, Work] = {}  # handed to the workers, not yet taken
        self._done: dict[int, Compiled] = {}
        self._pool = Supervisor(_serve, [f"mpitune-compile-{i}" for i in range(workers)], nice=NICE)
        self._start()

    def _start(self) -> None:
        self._tasks, self._results = SPAWN.Queue(), SPAWN.Queue()
        self._pool.start(self._tasks, self._results, self.warm_up)

    def submit(self, items: Iterable[Work], since_s: float | None = None) -> None:
        """Queue configurations in order; one already queued is not queued twice.

        ``since_s`` is when rank 0 dealt them. It is for a simulated clock: real compiles start
        when queued."""
        for work in items:
            if work.config_id not in self._queued:
                self._queued[work.config_id] = work
                assert self.compiler is not None, "the compiler is set before anything is submitted"
                self._tasks.put(CompileTask(self.compiler, work))

    def keep_only(self, config_ids: Iterable[int]) -> None:
        """Forget configurations that will not be measured: a prediction that did not come true.

        Their compiles still run. Their results are dropped when they arrive."""
        keep = set(config_ids)
        for config_id in [c for c in self._queued if c not in keep]:
            del self._queued[config_id]
            self._done.pop(config_id, None)

    def take(self, work: Work, deadline_s: float | None) -> Compiled:
        """The compiled configuration, waiting for it if need be (queued now if it was not).

        A compile that outlasts ``deadline_s`` is a ``timeout``. A worker that dies loses the
        compile it held, which becomes a ``runtime_error``. Either way the workers are
        restarted and what was queued is queued again.
        """
        config_id = work.config_id
        self.submit([work])
        patience = Patience(deadline_s)
        while config_id not in self._done:
            try:
                compiled: Compiled = self._pool.receive(self._results, patience)
            except Hang:
                return self._give_up(
                    config_id,
                    Status.TIMEOUT,
                    f"compiling took longer than {deadline_s:.1f} s (the limit for one configuration)",
                )
            except Death:
                return self._give_up(config_id, Status.RUNTIME_ERROR, "a compile worker died")
            if compiled.config_id in self._queued:
                self._done[compiled.config_id] = compiled
        del self._queued[config_id]
        return self._done.pop(config_id)

    def _give_up(self, config_id: int, status: Status, why: str) -> Compiled:
        log.warning("configuration %d: %s; restarting the compile workers", config_id, why)
        del self._queued[config_id]
        self._kill()
        requeue = [work for c, work in self._queued.items() if c not in self._done]
        for work in requeue:
            del self._queued[work.config_id]
        self._start()
        self.submit(requeue)
        return Compiled(config_id, status=status, error=why)

    def row(self, compiled: Compiled, batch: int) -> PhaseRow | None:
        """The background compile as a phase on this rank's clock (None if it never ran)."""
        if not compiled.finished:
            return None
        origin = self.clock.origin
        return PhaseRow(
            batch, compiled.config_id, "compile_ahead", compiled.started - origin, compiled.finished - origin
        )

    def _kill(self) -> None:
        self._pool.kill()
        for q in (self._tasks, self._results):
            q.close()
            q.cancel_join_thread()

    def close(self) -> None:
        self._queued.clear()
        self._done.clear()
        self._kill()
