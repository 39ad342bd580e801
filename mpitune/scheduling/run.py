"""Longer than 400 lines: the run on a rank whole, under MPI, in a job of several device models and
simulated in one process for ``plan``, which share its steps (load, equip, open, search).

The scheduler's run on one rank, from start-up to the file's last write; rank 0 manages the
search, every rank measures. The rounds themselves are rounds.py. An order to stop ends every rank
with its reason's exit code. A rank that stops answering ends the job with ``ExitCode.RESUMABLE``,
keeping what the file holds (faults/__init__.py says how)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace

from mpitune import backends
from mpitune.backends.base import Backend
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.errors import UserError
from mpitune.exits import ExitCode
from mpitune.model.problem import Kernel, Problem, RunSettings
from mpitune.model.replay_clock import RecordedRun
from mpitune.model.timeline import Clock, PhaseRow, Timeline
from mpitune.process import simulated_compile
from mpitune.process.compile_ahead import CompileAhead, CompilePool, default_workers
from mpitune.process.isolation import IsolatedBackend
from mpitune.scheduling import before_mpi
from mpitune.scheduling.before_mpi import Preloaded
from mpitune.scheduling.comm import MPI, MpiTransport
from mpitune.scheduling.devices import models
from mpitune.scheduling.faults.ending import abandon
from mpitune.scheduling.faults.guard import Guard, arm, guard
from mpitune.scheduling.faults.liveness import Watch
from mpitune.scheduling.faults.signals import stop_requests
from mpitune.scheduling.manager import Manager, Setup
from mpitune.scheduling.messages import Placement, StopReason
from mpitune.scheduling.prepare import Deadline, prepare
from mpitune.scheduling.rank import measuring_timeline
from mpitune.scheduling.rounds import rounds
from mpitune.scheduling.run_record import finish, open_run, say
from mpitune.scheduling.transport import InProcessRanks, SilentRanks, Transport, first_error, leave_together

__all__ = ["MPI", "simulate", "tune"]  # the command line reads the rank from MPI and aborts through it

log = logging.getLogger(__name__)


def tune(
    load: Callable[[], tuple[Problem, RunSettings]],
    command: str = "",
    debug: bool = False,
    transport: Transport | None = None,
    liveness_timeout_s: float | None = None,
    guarded: Guard | None = None,
    deadline: Deadline | None = None,
) -> int:
    """Run one tuning job on every rank of the transport (COMM_WORLD unless given); returns the exit
    code.

    ``load`` is called on rank 0 only. It returns the checked problem and settings, from a spec file
    or from measured data to replay. On COMM_WORLD every rank first starts its heartbeat
    (faults/guard.py, unless ``guarded`` has), so that a rank lost at any point ends the job.
    ``deadline``, where given, runs the search space's build, which runs the spec's restrictions."""
    watch = Watch()
    heartbeat = None
    if transport is None:
        started = guarded or guard(liveness_timeout_s)
        watch, heartbeat = started.watch, started.heartbeat
        transport = MpiTransport(MPI.COMM_WORLD, watch)
        if heartbeat is not None:
            heartbeat.know_hosts(transport.hosts)
    try:
        return _tune(load, command, debug, transport, watch, heartbeat.stop if heartbeat else lambda: None, deadline)
    finally:
        if heartbeat is not None:
            heartbeat.stop()


def _tune(
    load: Callable[[], tuple[Problem, RunSettings]],
    command: str,
    debug: bool,
    transport: Transport,
    watch: Watch,
    stop_beating: Callable[[], None],
    deadline: Deadline | None = None,
) -> int:
    """``tune`` on one transport. Rank 0's main thread holds ``watch.writing`` while it writes the
    file, so that its heartbeat thread can close it safely (faults/ending.py)."""
    rank = transport.rank
    refused = transport.world_error()
    if refused:  # each process is its world's rank 0: the launcher's numbering says which speaks
        return _refuse(refused.task, refused.line)
    timeline, started_unix = _begin(transport, load)
    setup, error = None, None
    if rank == 0:
        setup, error = _load(load, timeline, debug, deadline)
    with timeline.phase("wait"):
        error, workers = transport.bcast((error, setup.settings.compile_workers if setup else None))
    if error:
        return _refuse(rank, error)
    with timeline.phase("startup"):
        kernel = transport.bcast_problem(setup.problem if setup else None)
    caps = backends.capabilities(kernel.lang)
    recorded = kernel.replay.replayed_by(rank).run if kernel.replay else None  # a replay's: its file's run
    if caps.simulated_clock:
        # A replay's time is the recorded run's: its own start-up is no part of that (model/replay_clock.py).
        recorded = recorded or RecordedRun()
        timeline = recorded.timeline(rank)
        workers = recorded.compile_workers if workers is None else workers
    # On several ranks rank 0 measures on a timeline of its own, beside its hand-outs (rank.py).
    lane = rank == 0 and transport.size > 1
    measuring = measuring_timeline(timeline) if lane else timeline
    with timeline.phase("startup"):
        bench = _equip(kernel, caps, transport, workers, measuring, recorded)
    manager: Manager | None = None
    silent: SilentRanks | None = None
    try:
        manager, error, groups = _open(transport, setup, bench, timeline, watch, started_unix, command)
        if error:
            return _refuse(rank, error)
        caveat = cpu_oversubscribed(caps, transport.node_size, os.cpu_count() or 1)
        if rank == 0 and caveat:
            log.warning("%s", caveat)
        if groups is not None:
            assert isinstance(transport, MpiTransport), "only an MPI job spans device models"
            asked = models.Asked(load, debug, deadline, started_unix, command)
            return _grouped(transport, groups, setup, asked, bench, (timeline, measuring), watch)
        stop, silent = _search(transport, manager, bench, (timeline, measuring), watch, stop_beating)
        return stop.exit_code
    finally:
        bench.close()
        if silent is not None:  # only once the file is closed: a failed last write ends the job its own way
            abandon(silent, rank, manager.cache.path if manager else "")


def _grouped(
    world: MpiTransport,
    groups: models.Groups,
    setup: Setup | None,
    asked: models.Asked,
    bench: _Bench,
    timelines: tuple[Timeline, Timeline],
    watch: Watch,
) -> int:
    """This rank's part of a job over several device models (devices/models.py): its model's run
    on the group's ranks, then a wait for every group, under the heartbeats, which stop only then.
    A silent rank or a crash ends the whole job at once, as in a run of one model."""
    mine = models.split(world, groups)
    manager, error, silent = None, None, None
    if mine.link is not None:
        manager, error = _lead(world.rank, groups, mine, setup, asked, timelines[0], watch)
    error = mine.transport.bcast(error)
    if not error:
        stop, silent = _search(mine.transport, manager, bench, timelines, watch, lambda: None)
    if silent is not None:
        abandon(silent, world.rank, manager.cache.path if manager else "")
    if mine.link is not None:
        mine.link.leave()
    models.wait_for_all(world)
    mine.free()
    if error:
        return _refuse(mine.transport.rank, error)
    if world.rank == 0 and setup is not None:
        paths = " ".join(groups.paths(setup.settings.cache_path))
        say(f"each device model's results: {paths}; `python -m mpitune report` on them compares the models")
    return stop.exit_code


def _lead(
    world_rank: int,
    groups: models.Groups,
    mine: models.Split,
    setup: Setup | None,
    asked: models.Asked,
    timeline: Timeline,
    watch: Watch,
) -> tuple[Manager | None, str | None]:
    """A group's leader opens its model's file and run. The world's rank 0 has its search made; any
    other leader loads the spec or data as rank 0 did, its problem that of the file its ranks replay."""
    if setup is None:  # else the world's rank 0's, whose ranks replay the first file
        own = lambda problem: models.own_problem(problem, world_rank)
        setup, error = _load(asked.load, timeline, asked.debug, asked.deadline, own)
        if setup is None:
            return None, error
    paths = groups.paths(setup.settings.cache_path)
    setup = replace(setup, settings=replace(setup.settings, cache_path=paths[mine.group]))
    assert mine.link is not None, "a group's rank 0 leads it"
    peers = models.Peers(mine.link, mine.group, groups, paths, setup.space, setup.problem.kernel.kernel_name)
    with timeline.phase("startup"), watch.writing:
        placements = groups.placements_of(mine.group)
        opened = open_run(setup, placements, timeline.clock, asked.started_unix, asked.command, peers)
        if opened[0] is not None and world_rank == 0:  # the world's rank 0 runs the heartbeat that may close it
            arm(watch, opened[0], timeline)
    return opened


def _refuse(rank: int, error: str) -> int:
    """End this rank for an error the user can fix; rank 0 alone says why."""
    if rank == 0:
        print(f"mpitune: error: {error}", file=sys.stderr, flush=True)
    return ExitCode.USER_ERROR


def cpu_oversubscribed(caps: Capabilities, ranks_on_node: int, cores: int) -> str | None:
    """A warning when kernels timed on the CPU share too few cores. The ranks then time each other's
    load, and a configuration's launches spread widely. None when all is well."""
    if ranks_on_node <= cores or caps.device is not DeviceKind.CPU:
        return None
    return (
        f"{ranks_on_node} ranks on this node timed {caps.lang} kernels on {cores} core(s), so the ranks took "
        f"cores from each other's timings; for times that mean something, run at most {cores} rank(s) per node"
    )


def _begin(transport: Transport, load: Callable[[], tuple[Problem, RunSettings]]) -> tuple[Timeline, float]:
    """The run's timeline and its start in Unix time. With the spec loaded while MPI started
    (before_mpi.py, ``load_while``), the run began when the loading did. Rank 0's first rows are
    then the spec's loading and the start-up until MPI was up."""
    preloaded = load if isinstance(load, Preloaded) else None
    clock, started_unix = transport.start_clock(since=preloaded.started if preloaded else None)
    timeline = Timeline(clock)
    began_s = clock.now()  # MPI's start, from the run's beginning (next to nothing without a preload)
    if transport.rank == 0 and preloaded is not None:
        spec_s = preloaded.ended - clock.origin
        timeline.extend([PhaseRow(timeline.batch, -1, "spec", preloaded.started - clock.origin, spec_s)])
    else:
        spec_s = 0.0
    timeline.extend([PhaseRow(timeline.batch, -1, "startup", spec_s, max(spec_s, began_s))])
    return timeline, started_unix


def _load(
    load: Callable[[], tuple[Problem, RunSettings]],
    timeline: Timeline,
    debug: bool,
    deadline: Deadline | None,
    own: Callable[[Problem], Problem] = lambda problem: problem,
) -> tuple[Setup | None, str | None]:
    """Rank 0's input, loaded and checked; or why it is refused. ``own``: the part of the problem
    this rank's search is for (a group leader's, devices/models.py)."""
    try:
        if isinstance(load, Preloaded):
            problem, settings = load()  # its time is already on the timeline
        else:
            with timeline.phase("spec"):
                problem, settings = load()
        problem = own(problem)
        with timeline.phase("startup"):  # without a deadline, the build takes what it takes
            return (deadline(lambda: prepare(problem, settings)) if deadline else prepare(problem, settings)), None
    except UserError as exc:
        log.debug("the input was refused", exc_info=debug)
        return None, str(exc)


@dataclass
class _Bench:
    """What a rank measures with: its working folder, compile workers and backend. The backend is
    None when it could not be made; ``error`` says why."""

    workdir: str
    ahead: CompilePool | None
    backend: Backend | None = None
    error: str | None = None

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead.close()
        if self.backend is not None:
            self.backend.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _equip(
    kernel: Kernel,
    caps: Capabilities,
    transport: Transport,
    workers: int | None,
    timeline: Timeline,
    recorded: RecordedRun | None,
) -> _Bench:
    """This rank's bench: the worker the command line started (before_mpi.py) or a new one, isolated
    where the problem and backend allow, and the compile workers with its compiler. ``recorded``:
    the run a replayed rank replays."""
    clock = timeline.clock
    bench = _Bench(
        tempfile.mkdtemp(prefix=f"mpitune-rank{transport.rank}-"),
        _compile_ahead(caps, transport.node_size, workers, clock, recorded, transport.rank),
    )
    isolate = kernel.isolate and caps.isolate
    spawned = before_mpi.claim(kernel.lang, isolate, transport.node_rank)  # the worker the command line started
    try:
        if isolate:
            bench.backend = IsolatedBackend(
                kernel, bench.workdir, clock, kernel.timeout_s, transport.node_rank, spawned, timeline
            )
        else:
            bench.backend = backends.create(kernel, bench.workdir, transport.node_rank, transport.rank)
            bench.backend.prepare()
        if bench.ahead is not None:
            bench.ahead.compiler = bench.backend.compiler()
    except UserError as exc:
        bench.error = str(exc)
    return bench


def _open(
    transport: Transport,
    setup: Setup | None,
    bench: _Bench,
    timeline: Timeline,
    watch: Watch,
    started_unix: float,
    command: str,
) -> tuple[Manager | None, str | None, models.Groups | None]:
    """Every rank's placement to rank 0, which opens the file, records the run and arms the watch
    (faults/guard.py). Returns rank 0's Manager, on every rank the first error of any rank, and the
    groups of a job that tunes each device model apart (devices/models.py; None: one run, as rank 0's)."""
    backend, ahead = bench.backend, bench.ahead
    with timeline.phase("wait"):
        error = first_error(transport, bench.error)
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
        return None, error, None
    manager, groups = None, None
    if transport.rank == 0:
        assert setup is not None and placements is not None
        groups = models.Groups.of(setup.settings, placements)
        if groups is None:
            with timeline.phase("startup"), watch.writing:
                manager, error = open_run(setup, placements, timeline.clock, started_unix, command)
                if manager is not None:
                    arm(watch, manager, timeline)
        else:
            say(f"each device model tuned apart: {groups.describe()}")
    with timeline.phase("wait"):
        error, groups = transport.bcast((error, groups))
        return manager, error, groups


def _search(
    transport: Transport,
    manager: Manager | None,
    bench: _Bench,
    timelines: tuple[Timeline, Timeline],
    watch: Watch,
    stop_beating: Callable[[], None],
) -> tuple[StopReason, SilentRanks | None]:
    """The rounds, under the stop requests (faults/signals.py), and the file's last write. Then the
    ranks leave together, unless ranks fell silent: those are returned, for the job to end.
    ``timelines``: the rank's, and the one it measures on (rank 0's own on several ranks)."""
    assert bench.backend is not None  # every rank has one once no rank has an error
    silent = None
    timeline, measuring = timelines
    with stop_requests(manager):
        try:
            stop = rounds(transport, manager, bench.backend, timeline, bench.ahead, watch, stop_beating, measuring)
        except SilentRanks as exc:
            silent, stop = exc, StopReason.SILENT_RANK
    if manager:
        with watch.writing:
            if not watch.closed:  # else the heartbeat thread closed it and is ending the job
                finish(manager, timeline)  # the file's last write, and its lock released
                watch.closed = True
    if silent is None:
        leave_together(transport)
    return stop, silent


def _compile_ahead(
    caps: Capabilities,
    ranks_on_node: int,
    workers: int | None,
    clock: Clock,
    recorded: RecordedRun | None = None,
    rank: int = 0,
) -> CompilePool | None:
    """This rank's compile workers, started before its device is ready: as many as asked, else as
    its cores allow. None by default where kernels run on the CPU: compiling beside them would
    disturb their timings. A replay's compile nothing; they are numbers on its simulated clock, as
    many as asked, else as the replayed run had."""
    if caps.simulated_clock:
        return simulated_compile.replayed(recorded or RecordedRun(), workers, clock, rank)
    if workers is None:
        workers = default_workers(ranks_on_node) if caps.device is DeviceKind.GPU else 0
    if caps.device is DeviceKind.NONE:
        workers = 0
    started = before_mpi.compile_ahead(caps.lang, workers, clock)  # the command line's, if they fit
    if started is not None or workers <= 0:
        return started
    return CompileAhead(workers, clock, warm_up=backends.warm_up(caps.lang))


@dataclass(frozen=True)
class Simulated:
    """One simulated run: its ranks, simulated wall time and configurations measured."""

    ranks: int
    wall_s: float
    measured: int


def simulate(problem: Problem, settings: RunSettings, ranks: int, workdir: str) -> Simulated:
    """The replay of ``problem`` on ``ranks`` ranks, all in this process, into a file in
    ``workdir``, for ``python -m mpitune plan``. The real rounds run over ``InProcessRanks``. Each
    rank has its own replay backend, clock, recorded start-up and simulated compile workers, as
    under mpiexec. Its progress lines are not printed."""
    recorded = problem.kernel.replay.run if problem.kernel.replay else RecordedRun()
    workers = recorded.compile_workers if settings.compile_workers is None else settings.compile_workers
    settings = replace(settings, cache_path=os.path.join(workdir, f"plan-{ranks}.h5"))
    setup = prepare(problem, settings)
    timelines: list[Timeline] = []
    aheads: list[CompilePool | None] = []
    benches = []
    measuring: Timeline | None = None  # rank 0's own, on several ranks (rank.py)
    for rank in range(ranks):
        timelines.append(recorded.timeline(rank))
        benches.append(backends.create(problem.for_workers(), workdir, 0, rank))
        if rank == 0 and ranks > 1:
            measuring = measuring_timeline(timelines[0])
        clock = measuring.clock if rank == 0 and measuring is not None else timelines[-1].clock
        aheads.append(simulated_compile.replayed(recorded, workers, clock, rank))
        if aheads[-1] is not None:
            aheads[-1].compiler = benches[-1].compiler()
    world = InProcessRanks(benches, timelines, aheads)
    placements = [Placement("simulated", b.device_name, "", 0, workers) for b in benches]
    with contextlib.redirect_stdout(io.StringIO()):  # the progress lines
        manager, error = open_run(setup, placements, timelines[0].clock, 0.0, "plan")
        assert manager is not None, error
        rounds(world, manager, benches[0], timelines[0], aheads[0], Watch(), lambda: None, measuring)
        finish(manager, timelines[0])
    return Simulated(ranks, timelines[0].clock.now(), manager.measured)
