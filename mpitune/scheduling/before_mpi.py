"""What a rank starts before MPI is up: its measuring worker (process/isolation.py) and, on a GPU,
its compile workers (process/compile_ahead.py); on rank 0, the spec's loading.

A worker's start (a fresh Python, CuPy, the CUDA context) takes seconds and needs no problem, which
reaches a rank only after MPI's start, the spec and a broadcast. So the command line spawns it
first, for the backend the spec's syntax names and the launcher's node-local rank. run.py claims the
workers if they fit the problem and MPI's node-local rank, else ends them (``claim``,
``compile_ahead``); the command line ends what nothing claims (``end``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from mpitune.process.prewarm import Spawned, spawn_worker

if TYPE_CHECKING:
    from mpitune.model.problem import Problem, RunSettings
    from mpitune.model.timeline import Clock
    from mpitune.process.compile_ahead import CompileAhead

# The node-local rank as launchers announce it before MPI is up: Open MPI, MPICH's Hydra, PMI
# launchers, then Slurm's, which an ``mpirun`` in a batch job inherits (right only under srun).
LOCAL_RANK_VARIABLES = (
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
)
# The rank in the whole job as launchers announce it; Slurm's last, for the same reason.
WORLD_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
# How many ranks the launcher started on this node: Open MPI, MPICH's Hydra.
LOCAL_SIZE_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
# Any of these says a launcher started this process, as one rank among others.
_LAUNCHED_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")

log = logging.getLogger(__name__)

_early: Spawned | None = None  # this process's worker, started early and not yet claimed
_ahead: tuple[str, CompileAhead] | None = None  # its compile workers, and the backend they are for


def _announced(names: tuple[str, ...], environ: Mapping[str, str] | None, alone: int = 0) -> int | None:
    """The first of ``names`` the launcher set to a number of at least ``alone``. ``alone`` for a
    process no launcher started (MPI makes it a world of one); None for a launcher that does not
    say."""
    env = os.environ if environ is None else environ
    for name in names:
        text = env.get(name, "").strip()
        if text.isdigit() and int(text) >= alone:
            return int(text)
    return None if any(name in env for name in _LAUNCHED_VARIABLES) else alone


def launcher_local_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """The node-local rank the launcher announces (see ``_announced``)."""
    return _announced(LOCAL_RANK_VARIABLES, environ)


def launcher_world_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """The job-wide rank the launcher announces (see ``_announced``)."""
    return _announced(WORLD_RANK_VARIABLES, environ)


def launcher_local_size(environ: Mapping[str, str] | None = None) -> int | None:
    """The ranks the launcher started on this node (see ``_announced``)."""
    return _announced(LOCAL_SIZE_VARIABLES, environ, alone=1)


def check_backend_environment() -> None:
    """Refuse (``UserError``) a backend setting from the environment that cannot be taken (the
    kernel cache's bound), before the workers that read it compile anything."""
    from mpitune.backends.kernel_cache import max_bytes

    max_bytes()


def start(lang_text: str | None) -> None:
    """Spawn this rank's worker now, for the backend a spec's ``lang`` names. None: not known
    without running the spec, or no isolation asked for; none starts. Nothing heavy is imported
    before the spawn, so the worker starts as soon as the rank's Python does."""
    global _early
    if _early is None and lang_text:
        _early = spawn_worker(lang_text, launcher_local_rank())


def start_compile_workers(compile_workers: int | None = None) -> None:
    """After ``start``: spawn the compile workers for the early worker's backend.
    ``compile_workers``: the command line's count (None: the default). The spawns take a few tenths
    of a second, spent beside the spec's loading."""
    global _ahead
    if _early is None or _ahead is not None:
        return
    lang_text = _early.lang
    from mpitune import backends
    from mpitune.backends.capabilities import DeviceKind
    from mpitune.model.timeline import Clock
    from mpitune.process.compile_ahead import CompileAhead, default_workers

    caps = backends.resolve(lang_text)
    if caps is None or caps.device is DeviceKind.NONE:
        return
    workers = compile_workers
    if workers is None and caps.device is DeviceKind.GPU:
        ranks_on_node = launcher_local_size()
        workers = None if ranks_on_node is None else default_workers(ranks_on_node, warn=False)
    if workers:  # their clock is the run's, given when run.py takes them
        _ahead = caps.lang, CompileAhead(workers, Clock(), warm_up=backends.warm_up(caps.lang))


def compile_ahead(lang: str, workers: int, clock: Clock) -> CompileAhead | None:
    """The early compile workers, on the run's ``clock``, if they are ``workers`` for backend
    ``lang``. Otherwise they are ended; None: the caller starts its own."""
    global _ahead
    early, _ahead = _ahead, None
    if early is None:
        return None
    started_for, ahead = early
    if (started_for, ahead.workers) == (lang, workers) and workers > 0:
        log.info("%d compile worker(s), started before MPI, take the configurations", workers)
        ahead.clock = clock
        return ahead
    log.info(
        "ending %d compile worker(s) started before MPI for %s: the run wants %d for %s",
        ahead.workers,
        started_for,
        workers,
        lang,
    )
    ahead.close()
    return None


def claim(lang: str, isolate: bool, local_rank: int) -> Spawned | None:
    """The early worker, if it warmed up what a problem of ``lang`` on MPI's ``local_rank`` needs.
    Otherwise it is ended; None: the caller starts one itself if it needs one."""
    global _early
    spawned, _early = _early, None
    if spawned is None:
        return None
    from mpitune import backends  # imported by run.py by now; not before the spawn

    ago_s = time.perf_counter() - spawned.spawned_at
    caps = backends.resolve(spawned.lang)
    if isolate and caps is not None and caps.lang == lang and spawned.local_rank in (None, local_rank):
        log.info("worker process %d, started %.2f s ago before MPI, takes the problem", spawned.pid, ago_s)
        return spawned
    why = (
        "the problem needs no worker process"
        if not isolate
        else f"it warmed up backend {spawned.lang} on local rank {spawned.local_rank} and the problem needs "
        f"{lang} on local rank {local_rank} (MPI's): starting a fresh one"
    )
    log.info("ending worker process %d, started %.2f s ago before MPI: %s", spawned.pid, ago_s, why)
    spawned.end()
    return None


def end() -> None:
    """End the early worker and compile workers that nothing claimed (the spec refused, MPI failed),
    at once."""
    global _early, _ahead
    spawned, _early = _early, None
    if spawned is not None:
        log.info("ending worker process %d, started before MPI: no problem came for it", spawned.pid)
        spawned.end()
    early, _ahead = _ahead, None
    if early is not None:
        log.info("ending %d compile worker(s), started before MPI: no problem came for them", early[1].workers)
        early[1].close()


# Rank 0 loads its spec in the main thread (where its deadline's alarm comes) while MPI starts
# beside it: neither needs the other (docs/performance.md, "Start-up"). The run's clock begins
# when the loading did, on every rank (comm.start_clock).

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Preloaded:
    """What loading the spec gave (or raised), and when: ``time.perf_counter()`` values."""

    started: float
    ended: float
    loaded: tuple[Problem, RunSettings] | None
    error: BaseException | None

    @classmethod
    def run(cls, load: Callable[[], tuple[Problem, RunSettings]]) -> Preloaded:
        """Call ``load`` now, keeping whatever it raises (a user's error, an interrupt) for run.py
        to meet where it would have called ``load`` itself."""
        started = time.perf_counter()
        try:
            loaded = load()
        except BaseException as exc:  # re-raised by __call__, in run.py
            return cls(started, time.perf_counter(), None, exc)
        return cls(started, time.perf_counter(), loaded, None)

    def __call__(self) -> tuple[Problem, RunSettings]:
        if self.error is not None:
            raise self.error
        assert self.loaded is not None
        return self.loaded


def load_while(start: Callable[[], T], load: Callable[[], tuple[Problem, RunSettings]]) -> tuple[T, Preloaded]:
    """``start()`` (MPI's start) in a thread while ``load()`` runs in this one; both results, once
    both are done. What ``start`` raises is raised here; what ``load`` raises waits in the record."""
    return _beside(start, lambda: Preloaded.run(load))


def warm_while(start: Callable[[], T], warm: Callable[[], object]) -> T:
    """On a rank other than 0: ``start()`` in a thread while ``warm()`` reads here what this rank
    needs once MPI is up (a replay's data, ``measured.load_shared``). What ``warm`` raises is let
    go: rank 0 reads the same input and says what is wrong. An interrupt is not."""

    def here() -> None:
        try:
            warm()
        except Exception:  # rank 0's loading says why, to every rank
            log.debug("reading ahead of MPI failed", exc_info=True)

    return _beside(start, here)[0]


def _beside(start: Callable[[], T], here: Callable[[], U]) -> tuple[T, U]:
    """``start()`` in a thread while ``here()`` runs in this one; what ``start`` raises is raised."""
    started: list[T] = []
    failed: list[BaseException] = []

    def run_start() -> None:
        try:
            started.append(start())
        except BaseException as exc:  # raised below, in the calling thread
            failed.append(exc)

    thread = threading.Thread(target=run_start, name="mpitune-mpi-start", daemon=True)
    thread.start()
    try:
        done = here()
    finally:
        thread.join()
    if failed:
        raise failed[0]
    return started[0], done
