"""The scheduler: rank 0 manages the search, every rank (rank 0 too) measures. This module runs a
rank from start-up to the file's last write; the rounds themselves are rounds.py.

One round: rank 0's Manager makes one ``Order`` per rank (a chunk of configuration ids), the
transport scatters them; each rank runs its chunk on its own backend (in a supervised worker
process, see isolation.py) and answers with a ``Report`` (results and timeline rows), gathered
at rank 0, which writes them to the cache, tells the strategy and prints a progress line.
An order to stop ends every rank, with the exit code of its reason. A rank that stops answering
ends the job with ``EXIT_RESUMABLE``: its heartbeat falls silent (heartbeat.py) or its batch's
deadline passes (deadlines.py), and ending.py ends the job, keeping what the file holds.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from mpitune import backends
from mpitune.backends.base import Backend
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.errors import UserError
from mpitune.model.problem import Problem, RunSettings
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import Clock, PhaseRow, Timeline
from mpitune.process.compile_ahead import CompileAhead, default_workers
from mpitune.process.isolation import IsolatedBackend
from mpitune.scheduling import early
from mpitune.scheduling.comm import MPI, MpiTransport
from mpitune.scheduling.ending import abandon, on_rank0, on_worker
from mpitune.scheduling.heartbeat import Heartbeat
from mpitune.scheduling.interrupts import EXIT_INTERRUPTED, stop_requests
from mpitune.scheduling.liveness import Watch, timeout_s
from mpitune.scheduling.manager import Manager, Setup
from mpitune.scheduling.messages import Placement, StopReason
from mpitune.scheduling.preloaded import Preloaded
from mpitune.scheduling.rounds import rounds
from mpitune.scheduling.session import cpu_oversubscribed, finish, open_run, prepare, refuse
from mpitune.scheduling.transport import SilentRanks, Transport, first_error, leave_together

__all__ = ["EXIT_INTERRUPTED", "MPI", "tune"]  # the command line reads the rank from MPI and aborts through it

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Guard:
    """A rank's liveness watch, started with MPI: on rank 0 before its spec is loaded, where
    that happens beside MPI's start (preloaded.py), so that a rank lost meanwhile ends
    the job as it would later."""

    watch: Watch
    heartbeat: Heartbeat | None


def guard(liveness_timeout_s: float | None = None) -> Guard:
    """Start this rank's heartbeat on COMM_WORLD (heartbeat.py; ``liveness_timeout_s``: None for
    the environment's or the default, 0 for none). Collective."""
    comm = MPI.COMM_WORLD
    watch = Watch()
    beat = Heartbeat.start(comm, timeout_s(liveness_timeout_s), on_rank0(watch) if comm.rank == 0 else on_worker)
    return Guard(watch, beat)


def tune(
    load: Callable[[], tuple[Problem, RunSettings]],
    command: str = "",
    debug: bool = False,
    transport: Transport | None = None,
    liveness_timeout_s: float | None = None,
    guarded: Guard | None = None,
) -> int:
    """Run one tuning job on every rank of the transport (COMM_WORLD unless given); returns the exit code.

    ``load`` is called on rank 0 only and returns the checked problem and settings (from a
    spec file, or from measured data to replay). On COMM_WORLD every rank first starts its
    heartbeat (``guard``, unless ``guarded`` says it has started), so that a rank lost at any
    point, start-up included, ends the job.
    """
    watch = Watch()
    heartbeat = None
    if transport is None:
        started = guarded or guard(liveness_timeout_s)
        watch, heartbeat = started.watch, started.heartbeat
        transport = MpiTransport(MPI.COMM_WORLD, watch)
        if heartbeat is not None:
            heartbeat.know_hosts(transport.hosts)
    try:
        return _tune(load, command, debug, transport, watch, heartbeat.stop if heartbeat else _nothing)
    finally:
        if heartbeat is not None:
            heartbeat.stop()


def _nothing() -> None:
    pass


def _tune(
    load: Callable[[], tuple[Problem, RunSettings]],
    command: str,
    debug: bool,
    transport: Transport,
    watch: Watch,
    stop_beating: Callable[[], None],
) -> int:
    """``tune`` on one transport; rank 0's main thread holds ``watch.writing`` while it writes
    the file, so that its heartbeat thread can close it safely (ending.py)."""
    rank = transport.rank
    error = transport.world_error()
    if error:
        return refuse(int(os.environ.get("SLURM_PROCID", "0")), error)
    # With the spec loaded while MPI started (preloaded.py), the run began when that did.
    preloaded = load if isinstance(load, Preloaded) else None
    clock, started_unix = transport.start_clock(since=preloaded.started if preloaded else None)
    timeline = Timeline(clock)
    began_s = clock.now()  # MPI's start, from the run's beginning (next to nothing without a preload)
    if rank == 0 and preloaded is not None:
        spec_s = preloaded.ended - clock.origin
        timeline.extend([PhaseRow(timeline.batch, -1, "spec", preloaded.started - clock.origin, spec_s)])
    else:
        spec_s = 0.0
    timeline.extend([PhaseRow(timeline.batch, -1, "startup", spec_s, max(spec_s, began_s))])
    silent: SilentRanks | None = None
    abandoning: SilentRanks | None = None

    setup: Setup | None = None
    if rank == 0:
        try:
            if preloaded is not None:
                loaded = preloaded()
            else:
                with timeline.phase("spec"):
                    loaded = load()
            with timeline.phase("startup"):
                setup = prepare(*loaded)
        except UserError as exc:
            log.debug("the input was refused", exc_info=debug)
            error = str(exc)
    with timeline.phase("wait"):
        error, workers = transport.bcast((error, setup.settings.compile_workers if setup else None))
    if error:
        return refuse(rank, error)

    with timeline.phase("startup"):
        problem, indices = transport.bcast_problem(
            setup.problem if setup else None, setup.space.indices if setup else None
        )
    caps = backends.capabilities(problem.lang)
    if caps.simulated_clock:
        # A replay's time is the measured time of the real run it stands for; the start-up
        # of the replay itself is no part of that.
        clock = Clock(simulated=True)
        timeline = Timeline(clock)
    with timeline.phase("startup"):
        space = SearchSpace(problem.tune_params, indices)
        workdir = tempfile.mkdtemp(prefix=f"mpitune-rank{rank}-")
        backend: Backend | None = None
        ahead = _compile_ahead(caps, transport.node_size, workers, clock)
        isolate = problem.isolate and caps.isolate
        spawned = early.claim(problem.lang, isolate, transport.node_rank)  # the worker the command line started
        try:
            if isolate:
                backend = IsolatedBackend(
                    problem, workdir, clock, problem.timeout_s, transport.node_rank, spawned, timeline
                )
            else:
                backend = backends.create(problem, workdir, transport.node_rank)
                backend.prepare()
            if ahead is not None:
                ahead.compiler = backend.compiler()
        except UserError as exc:
            error = str(exc)
    try:
        with timeline.phase("wait"):
            error = first_error(transport, error)
            placements = transport.gather(
                Placement(
                    socket.gethostname(),
                    backend.device_name if backend else "",
                    backend.device_detail if backend else "",
                    os.getpid(),
                    ahead.workers if ahead else 0,
                )
            )
        if error:
            return refuse(rank, error)
        assert backend is not None  # every rank has one once no rank has an error

        manager = None
        if rank == 0:
            assert setup is not None and placements is not None
            with timeline.phase("startup"), watch.writing:
                manager, error = open_run(setup, placements, clock, started_unix, command)
                if manager is not None:
                    watch.path, watch.close = manager.cache.path, _closer(manager, timeline)
        with timeline.phase("wait"):
            error = transport.bcast(error)
        if error:
            return refuse(rank, error)
        caveat = cpu_oversubscribed(caps, transport.node_size, os.cpu_count() or 1)
        if manager and caveat:
            log.warning("%s", caveat)

        with stop_requests(manager):
            try:
                stop = rounds(transport, manager, backend, space, timeline, ahead, watch, stop_beating)
            except SilentRanks as exc:
                silent, stop = exc, StopReason.SILENT_RANK
        if manager:
            with watch.writing:
                if not watch.closed:  # else the heartbeat thread closed it and is ending the job
                    finish(manager, timeline)  # the file's last write, and its lock released
                    watch.closed = True
        abandoning = silent  # only once the file is closed: a failed last write ends the job its own way
        if silent is None:
            leave_together(transport)
        return stop.exit_code
    finally:
        if ahead is not None:
            ahead.close()
        if backend is not None:
            backend.close()
        shutil.rmtree(workdir, ignore_errors=True)
        if abandoning is not None:
            abandon(abandoning, rank, manager.cache.path if manager else "")


def _compile_ahead(caps: Capabilities, ranks_on_node: int, workers: int | None, clock: Clock) -> CompileAhead | None:
    """This rank's compile workers, started before its device is ready: as many as asked,
    else as its cores allow; none by default where kernels run on the CPU, whose timings
    compiling beside them would disturb, and none for a replay, which compiles nothing."""
    if workers is None:
        workers = default_workers(ranks_on_node) if caps.device is DeviceKind.GPU else 0
    if caps.device is DeviceKind.NONE:
        workers = 0
    started = early.compile_ahead(caps.lang, workers, clock)  # the command line's, if they fit
    if started is not None or workers <= 0:
        return started
    return CompileAhead(workers, clock, warm_up=backends.warm_up(caps.lang))


def _closer(manager: Manager, timeline: Timeline) -> Callable[[], None]:
    """What rank 0's heartbeat thread calls, with ``watch.writing`` held, to end a run the main
    thread cannot end (it is measuring): the run is marked ``silent_rank`` and the file closed,
    its lock released. The batch in flight stays recorded as in flight; no search end is
    recorded, so the next run starts its strategy as after a killed run."""

    def close() -> None:
        manager.stop_reason = StopReason.SILENT_RANK
        manager.cache.finish_run(timeline.clock.now(), StopReason.SILENT_RANK.value, manager.measured)
        manager.cache.close()

    return close
