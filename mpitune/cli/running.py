"""The tuning run on this rank, from start to end.

The worker is spawned before MPI. MPI starts while rank 0 loads the spec. Then the loop runs.
The end never leaves a rank waiting. An error that is not the user's, or a write that fails,
aborts the whole job (scheduling/faults/aborting.py). A thread the spec left running is not
waited for."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import shlex
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

# numpy and what needs it are imported where used: a tuning rank spawns its worker process
# first (scheduling/before_mpi.py), and every import before that spawn delays the worker.
from mpitune.cli.parsers import refuse

if TYPE_CHECKING:
    from mpitune.model.problem import Problem, RunSettings
    from mpitune.scheduling.faults.guard import Guard
    from mpitune.scheduling.prepare import Deadline


def setup_logging(args, rank: int) -> None:
    level = logging.DEBUG if args.debug else logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(
        level=level, stream=sys.stderr, format=f"%(asctime)s rank {rank} %(levelname)s %(name)s: %(message)s"
    )


def _calm_oversubscribed_mpich() -> None:
    """With more ranks on a node than cores, MPICH's busy polling starves the ranks that work.
    Its progress throttle makes idle ranks yield. MPICH reads it at MPI_Init, so it is set before."""
    local_ranks = os.environ.get("MPI_LOCALNRANKS")
    if local_ranks and local_ranks.isdigit() and int(local_ranks) > (os.cpu_count() or 1):
        os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")
        os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT", "16")


def tune_command(
    args: argparse.Namespace,
    argv: list[str],
    load: Callable[[], tuple[Problem, RunSettings]],
    worker_lang: str | None = None,
    compile_workers: int | None = None,
    deadline: Deadline | None = None,
    warm: Callable[[], object] | None = None,
) -> int:
    """The tune or replay command on this rank; returns its exit code.

    ``load()`` gives the problem and settings. It runs on rank 0 only. ``worker_lang``: the
    backend to start this rank's worker process for, before MPI (None: none early). So are its
    compile workers, ``compile_workers`` of them (None: the default). ``deadline`` runs the search
    space's build (scheduling/run.py). ``warm`` runs on the other ranks while MPI starts. It reads
    what they read anyway once MPI is up: a replay's measured data."""
    _calm_oversubscribed_mpich()
    from mpitune.scheduling import before_mpi

    before_mpi.start(worker_lang)  # before MPI and the spec: the loop claims it
    try:
        refusal = bad_environment()
        if refusal:
            return refuse(refusal)
        return _run(args, argv, load, compile_workers, deadline, warm)
    finally:
        before_mpi.end()  # unclaimed (the spec refused, MPI failed): it must not outlive the rank


def bad_environment() -> str | None:
    """Why an environment variable cannot be taken, or None.

    The variables checked are the run settings' (spec/settings_table.py), MPI's start watch's and
    the kernel cache's bound. Every rank checks them before MPI starts. A bad one then ends each
    rank with one line, as a bad flag does. Later it would be a traceback, or a watch silently off.
    """
    from mpitune.errors import UserError
    from mpitune.scheduling.before_mpi import check_backend_environment
    from mpitune.scheduling.faults.liveness import seconds_setting
    from mpitune.scheduling.faults.start_watch import START_TIMEOUT_S, START_TIMEOUT_VARIABLE
    from mpitune.spec.settings_table import SETTINGS

    try:
        for setting in SETTINGS:
            if setting.variable is not None:
                setting.variable.read()
        seconds_setting(None, START_TIMEOUT_VARIABLE, START_TIMEOUT_S, None)
        check_backend_environment()
    except UserError as exc:
        return str(exc)
    return None


def _start_mpi(
    load: Callable[[], tuple[Problem, RunSettings]],
    compile_workers: int | None,
    liveness_timeout_s: float | None,
    warm: Callable[[], object] | None = None,
) -> tuple[tuple[ModuleType, Guard], Callable]:
    """MPI started, with this rank's heartbeat, and what the loop calls to load the spec.

    The compile workers are spawned first. MPI starts under a watch on its start
    (faults/start_watch.py). Importing the loop starts it: the loop imports mpi4py, which
    initialises MPI. The heartbeat starts with it (a ``Guard``, faults/guard.py). On the rank the
    launcher names 0, the spec loads meanwhile, under the heartbeat once MPI is up. On the others,
    ``warm`` runs meanwhile, where given."""
    from mpitune.scheduling import before_mpi
    from mpitune.scheduling.before_mpi import load_while, warm_while
    from mpitune.scheduling.faults.start_watch import StartWatch

    def start() -> tuple[ModuleType, Guard]:
        before_mpi.start_compile_workers(compile_workers)  # spawned before MPI initialises, as the worker
        watch = StartWatch(before_mpi.launcher_world_rank())
        try:
            loop = importlib.import_module("mpitune.scheduling.run")
        finally:
            watch.end()
        from mpitune.scheduling.faults.guard import guard

        return loop, guard(liveness_timeout_s)

    if before_mpi.launcher_world_rank() == 0:
        return load_while(start, load)
    return (warm_while(start, warm) if warm is not None else start()), load


def _run(
    args: argparse.Namespace,
    argv: list[str],
    load: Callable[[], tuple[Problem, RunSettings]],
    compile_workers: int | None = None,
    deadline: Deadline | None = None,
    warm: Callable[[], object] | None = None,
) -> int:
    """The run on this rank, MPI's start included. An error that is not the user's ends the job."""
    from mpitune.scheduling import before_mpi
    from mpitune.spec.settings_table import LIVENESS_TIMEOUT

    liveness_s = LIVENESS_TIMEOUT.merged(args.liveness_timeout)  # on every rank, before MPI
    (tuner, guard), load = _start_mpi(load, compile_workers, liveness_s, warm)
    from mpitune.scheduling.faults.aborting import abort_for, quiet_failed_writes  # MPI is up: free now

    rank = tuner.MPI.COMM_WORLD.rank
    setup_logging(args, rank)
    sys.unraisablehook = quiet_failed_writes
    command = shlex.join(["python", "-m", "mpitune", *argv])
    try:
        try:
            code = tuner.tune(load, command, debug=args.debug, guarded=guard, deadline=deadline)
        finally:
            before_mpi.end()  # before an abort below, which ends this process
    except BaseException as exc:  # the others would wait for this rank: end the job (faults/aborting.py)
        abort_for(exc, rank)
    _leave_now_if_threads_linger(code, tuner.MPI)
    return code


def _leave_now_if_threads_linger(code: int, mpi) -> None:
    """Everything is recorded by now. A thread the spec started (not a daemon) would keep the
    process, and so the job, alive after it. So MPI is finished, and the process exits without it."""
    lingering = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    if not lingering:
        return
    logging.getLogger("mpitune").warning("not waiting for thread(s) the spec started: %s", ", ".join(lingering))
    sys.stdout.flush()
    sys.stderr.flush()
    mpi.Finalize()
    os._exit(code)
