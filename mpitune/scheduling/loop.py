"""The scheduler: rank 0 manages the search, every rank (rank 0 too) measures.

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
import math
import os
import shutil
import socket
import tempfile
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
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
from mpitune.scheduling.deadlines import Deadlines, floor_s
from mpitune.scheduling.ending import abandon, on_rank0, on_worker
from mpitune.scheduling.heartbeat import Heartbeat
from mpitune.scheduling.interrupts import EXIT_INTERRUPTED, stop_requests
from mpitune.scheduling.liveness import Watch, timeout_s
from mpitune.scheduling.manager import Manager, Setup
from mpitune.scheduling.messages import Order, Placement, Report, StopReason
from mpitune.scheduling.preloaded import Preloaded
from mpitune.scheduling.rank import serve
from mpitune.scheduling.session import cpu_oversubscribed, finish, open_run, prepare, refuse, say
from mpitune.scheduling.transport import SilentRanks, Transport, first_error, leave_together

__all__ = ["EXIT_INTERRUPTED", "MPI", "tune"]  # the command line reads the rank from MPI and aborts through it

# Rank 0 still looks once for reports this long when its own chunk used up a batch's deadline.
_LAST_LOOK_S = 1.0

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
                stop = _rounds(transport, manager, backend, space, timeline, ahead, watch, stop_beating)
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


def _rounds(
    transport: Transport,
    manager: Manager | None,
    backend: Backend,
    space: SearchSpace,
    timeline: Timeline,
    ahead: CompileAhead | None,
    watch: Watch,
    stop_beating: Callable[[], None],
) -> StopReason:
    """Rounds until rank 0 says stop; returns why it did.

    Rank 0 keeps ``manager.depth`` batches in flight (two on several ranks): it sends batch b
    once it has recorded batch b - 2, so a worker finds its next order waiting when it reports
    a chunk (the transport keeps each rank's messages in order), and rank 0 measures its own
    chunks in turn, recording each batch after its own chunk of it.

    Every exchange has a deadline (deadlines.py) except a worker's wait for its first order,
    which the heartbeats cover, as they cover the start-up collectives. ``SilentRanks`` leaves
    here on every rank: on rank 0 after the reports that did arrive are recorded, the chunks of
    the ranks that did not answer are kept in the file as in flight and the run is marked
    ``silent_rank``, so that the file keeps every completed configuration and names the lost ones.
    The heartbeats stop with the order to stop: from there on the ranks leave one by one."""
    deadlines = None
    if manager:
        deadlines = Deadlines(floor_s(manager.settings.rank_deadline_floor_s), manager.setup.problem.timeout_s)
    patience_s: float | None = None  # how long a worker waits for its next order
    reported_s = math.nan  # when rank 0 had the last batch's reports
    own: deque[tuple[Order, float]] = deque()  # rank 0's orders in flight, with when each went out
    writing = watch.writing if manager else nullcontext()
    while True:
        batches = []
        if manager:
            assert deadlines is not None
            with timeline.phase("strategy"), writing:
                batches = [deadlines.stamp(orders) for orders in manager.fill()]
        with timeline.phase("wait"):
            if manager:
                for orders in batches:
                    own.append((transport.scatter(orders), time.monotonic()))
                if batches and deadlines is not None and not math.isnan(reported_s):
                    deadlines.turned(time.monotonic() - reported_s)
                order, sent_s = own.popleft()
                # This batch's deadline counts from when its ranks could start it: it went out,
                # and the batch before it was recorded (each rank had finished its chunk of that).
                sent_s = sent_s if math.isnan(reported_s) else max(sent_s, reported_s)
            else:
                order, sent_s = transport.scatter(None, patience_s), time.monotonic()
            timeline.clock.sync(order.now_s)
        patience_s = order.next_order_within_s
        if order.stop is not None:
            stop_beating()
            break
        report = serve(order, backend, space, transport.rank, timeline, ahead, _stopping(transport, manager))
        with timeline.phase("wait"):
            try:
                reports = transport.gather(report, _remaining_s(order.deadline_s, sent_s) if manager else patience_s)
            except SilentRanks as silent:
                if not manager:
                    raise
                watch.ending = True  # this thread ends the run: the heartbeat thread leaves the file alone
                if silent.heartbeat is None:
                    silent.waited_s, silent.expected_s = time.monotonic() - sent_s, order.expected_s
                _record_silent(manager, transport, timeline, writing, deadlines, silent, report)
                raise
            reported_s = time.monotonic()
            if manager:
                assert reports is not None
                timeline.clock.sync(max(r.now_s for r in reports))
        if manager:
            assert reports is not None and deadlines is not None
            deadlines.observe(next(iter(manager.in_flight.values())).orders, reports)
            with writing:
                _record(manager, timeline, reports)
    # The last rows of every rank (their final waits) reach rank 0 with one more gather.
    try:
        leftovers = transport.gather(timeline.take(), _remaining_s(order.deadline_s, sent_s) if manager else patience_s)
    except SilentRanks as silent:
        if manager:  # the search is over and recorded: only some timeline rows are missing
            silent.waited_s, silent.expected_s = time.monotonic() - sent_s, 0.0
            rows = silent.received
            with writing:
                manager.cache.append_phases([(r, p) for r in sorted(rows) for p in rows[r]])
        raise
    if manager:
        assert leftovers is not None
        with writing:
            manager.cache.append_phases([(r, p) for r, rows in enumerate(leftovers) for p in rows])
    return order.stop


def _stopping(transport: Transport, manager: Manager | None) -> Callable[[], bool]:
    """Whether the run is being stopped from outside the search (``StopReason.interrupts``),
    asked before each configuration: on rank 0 once the stop is requested, on a worker once
    the order to stop waits behind its chunk. The chunk then ends before its next
    configuration (after its first), so that such a stop comes within a configuration or two
    of the batch rank 0 records when it decides to stop, rather than after the batch already
    on its way too; what was not measured a rerun measures."""
    if manager is not None:
        return lambda: manager.stop_requested is not None
    return lambda: any(isinstance(o, Order) and o.stop is not None and o.stop.interrupts for o in transport.waiting())


def _record(manager: Manager, timeline: Timeline, reports: list[Report]) -> None:
    with timeline.phase("write"):
        results = manager.record(reports)
    with timeline.phase("strategy"):
        manager.tell(results)
        say(manager.progress_line())


def _record_silent(
    manager: Manager,
    transport: Transport,
    timeline: Timeline,
    writing: AbstractContextManager,
    deadlines: Deadlines | None,
    silent: SilentRanks,
    report: Report,
) -> None:
    """Rank 0's record of a run some ranks stopped answering in: what did arrive of the oldest
    batch, and of the batch after it what the live ranks had already sent (rank 0's own chunk
    of it was never measured), is measured work and recorded; the chunks whose reports did not
    come stay recorded as in flight (recording a batch cleared that record), so that ``check``
    names them, as it does after rank 0 was killed. The run is marked ``silent_rank``, and a
    resumed run's strategy starts afresh from the file."""
    manager.stop_reason = manager.stop_requested = StopReason.SILENT_RANK
    received = silent.received
    while True:
        batch, flight = next(iter(manager.in_flight.items()))
        reports = [received.get(r, Report([], [], report.now_s)) for r in range(transport.size)]
        if deadlines is not None:
            deadlines.observe(flight.orders, reports)
        with writing:
            _record(manager, timeline, reports)
            lost = [(rank, o.ids) for rank, o in enumerate(flight.orders) if rank not in received and o.ids]
            manager.cache.still_in_flight(batch, lost)
        if not manager.in_flight:
            return
        try:  # the next batch: one last look for what arrived, without waiting
            got = transport.gather(Report([], [], report.now_s), 0.0)
            assert got is not None
            arrived = dict(enumerate(got))
        except SilentRanks as more:
            arrived = more.received
        received = {r: got for r, got in arrived.items() if r != 0}


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


def _remaining_s(deadline_s: float | None, sent_s: float) -> float | None:
    """What is left of a deadline counted from ``sent_s``; rank 0 measured a chunk of its own
    meanwhile, and a report that is already there must still be looked for."""
    if deadline_s is None:
        return None
    return max(deadline_s - (time.monotonic() - sent_s), _LAST_LOOK_S)
