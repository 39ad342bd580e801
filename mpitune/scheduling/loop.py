"""The scheduler: rank 0 manages the search, every rank (rank 0 too) measures.

One round: rank 0's Manager makes one ``Order`` per rank (a chunk of configuration ids), the
transport scatters them; each rank runs its chunk on its own backend (in a supervised worker
process, see isolation.py) and answers with a ``Report`` (results and timeline rows), gathered
at rank 0, which writes them to the cache, tells the strategy and prints a progress line.
An order to stop ends every rank, with the exit code of its reason.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mpitune import backends
from mpitune.backends.base import Backend
from mpitune.backends.capabilities import Capabilities, DeviceKind
from mpitune.errors import EXIT_RESUMABLE, UserError
from mpitune.model.problem import Problem, RunSettings
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import Clock, Timeline
from mpitune.process.compile_ahead import CompileAhead, default_workers
from mpitune.process.isolation import IsolatedBackend
from mpitune.scheduling.comm import MPI, MpiTransport
from mpitune.scheduling.deadlines import Deadlines, floor_s
from mpitune.scheduling.manager import Manager, Setup
from mpitune.scheduling.messages import Placement, Report, StopReason
from mpitune.scheduling.rank import serve
from mpitune.scheduling.session import cpu_oversubscribed, finish, open_run, prepare, refuse, say
from mpitune.scheduling.transport import SilentRanks, Transport, first_error, who

__all__ = ["EXIT_INTERRUPTED", "MPI", "tune"]  # the command line reads the rank from MPI and aborts through it

# A job ended by a second Ctrl-C, or by one before tuning began: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130
# Rank 0 still looks once for reports this long when its own chunk used up a batch's deadline.
_LAST_LOOK_S = 1.0
# What the launcher is given to forward this rank's last lines before MPI_Abort ends it: MPICH's
# mpiexec dropped a line written just before the abort about one time in three.
_FORWARD_S = 0.2

log = logging.getLogger(__name__)


def tune(
    load: Callable[[], tuple[Problem, RunSettings]],
    command: str = "",
    debug: bool = False,
    transport: Transport | None = None,
) -> int:
    """Run one tuning job on every rank of the transport (COMM_WORLD unless given); returns the exit code.

    ``load`` is called on rank 0 only and returns the checked problem and settings (from a
    spec file, or from measured data to replay).
    """
    transport = transport or MpiTransport(MPI.COMM_WORLD)
    rank = transport.rank
    error = transport.world_error()
    if error:
        return refuse(int(os.environ.get("SLURM_PROCID", "0")), error)
    clock, started_unix = transport.start_clock()
    timeline = Timeline(clock)
    silent: SilentRanks | None = None
    abandon: SilentRanks | None = None

    setup: Setup | None = None
    if rank == 0:
        try:
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
        try:
            if problem.isolate and caps.isolate:
                backend = IsolatedBackend(problem, workdir, clock, problem.timeout_s, transport.node_rank)
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
            with timeline.phase("startup"):
                manager, error = open_run(setup, placements, clock, started_unix, command)
        with timeline.phase("wait"):
            error = transport.bcast(error)
        if error:
            return refuse(rank, error)
        caveat = cpu_oversubscribed(caps, transport.node_size, os.cpu_count() or 1)
        if manager and caveat:
            log.warning("%s", caveat)

        with _stop_requests(manager):
            try:
                stop = _rounds(transport, manager, backend, space, timeline, ahead)
            except SilentRanks as exc:
                silent, stop = exc, StopReason.SILENT_RANK
        if manager:
            finish(manager, timeline)  # the file's last write, and its lock released
        abandon = silent  # only once the file is closed: a failed last write ends the job its own way
        return stop.exit_code
    finally:
        if ahead is not None:
            ahead.close()
        if backend is not None:
            backend.close()
        shutil.rmtree(workdir, ignore_errors=True)
        if abandon is not None:
            _abandon(abandon, rank, manager.cache.path if manager else "")


def _compile_ahead(caps: Capabilities, ranks_on_node: int, workers: int | None, clock: Clock) -> CompileAhead | None:
    """This rank's compile workers, started before its device is ready: as many as asked,
    else as its cores allow; none by default where kernels run on the CPU, whose timings
    compiling beside them would disturb, and none for a replay, which compiles nothing."""
    if workers is None:
        workers = default_workers(ranks_on_node) if caps.device is DeviceKind.GPU else 0
    if workers <= 0 or caps.device is DeviceKind.NONE:
        return None
    return CompileAhead(workers, clock, warm_up=backends.warm_up(caps.lang))


def _rounds(
    transport: Transport,
    manager: Manager | None,
    backend: Backend,
    space: SearchSpace,
    timeline: Timeline,
    ahead: CompileAhead | None,
) -> StopReason:
    """Rounds until rank 0 says stop; returns why it did.

    Every exchange has a deadline (deadlines.py) except a worker's wait for its first order,
    which follows start-up collectives that have none either. ``SilentRanks`` leaves here on
    every rank: on rank 0 after the reports that did arrive are recorded and the run is marked
    ``silent_rank``, so that the file keeps every completed configuration."""
    deadlines = None
    if manager:
        deadlines = Deadlines(floor_s(manager.settings.rank_deadline_floor_s), manager.setup.problem.timeout_s)
    patience_s: float | None = None  # how long a worker waits for its next order
    reported_s = math.nan  # when rank 0 had the last round's reports
    while True:
        orders = None
        if manager:
            assert deadlines is not None
            with timeline.phase("strategy"):
                orders = deadlines.stamp(manager.next_orders())
        with timeline.phase("wait"):
            order = transport.scatter(orders, patience_s)
            sent_s = time.monotonic()
            if deadlines and not math.isnan(reported_s):
                deadlines.turned(sent_s - reported_s)
            timeline.clock.sync(order.now_s)
        patience_s = order.next_order_within_s
        if order.stop is not None:
            break
        report = serve(order, backend, space, transport.rank, timeline, ahead)
        silent = None
        with timeline.phase("wait"):
            try:
                reports = transport.gather(report, _remaining_s(order.deadline_s, sent_s) if manager else patience_s)
            except SilentRanks as exc:
                if not manager:
                    raise
                silent = exc
                silent.waited_s, silent.expected_s = time.monotonic() - sent_s, order.expected_s
                reports = [exc.received.get(r, Report([], [], report.now_s)) for r in range(transport.size)]
            reported_s = time.monotonic()
            if manager:
                assert reports is not None
                timeline.clock.sync(max(r.now_s for r in reports))
        if manager:
            assert reports is not None and orders is not None and deadlines is not None
            deadlines.observe(orders, reports)
            if silent is not None:
                # What did arrive is measured work: recorded, and the silent ranks' chunks are
                # left unmeasured (the strategy of a resumed run starts afresh from the file).
                manager.stop_reason = manager.stop_requested = StopReason.SILENT_RANK
            _record(manager, timeline, reports)
            if silent is not None:
                raise silent
    # The last rows of every rank (their final waits) reach rank 0 with one more gather.
    try:
        leftovers = transport.gather(timeline.take(), _remaining_s(order.deadline_s, sent_s) if manager else patience_s)
    except SilentRanks as silent:
        if manager:  # the search is over and recorded: only some timeline rows are missing
            silent.waited_s, silent.expected_s = time.monotonic() - sent_s, 0.0
            rows = silent.received
            manager.cache.append_phases([(r, p) for r in sorted(rows) for p in rows[r]])
        raise
    if manager:
        assert leftovers is not None
        manager.cache.append_phases([(r, p) for r, rows in enumerate(leftovers) for p in rows])
    return order.stop


def _record(manager: Manager, timeline: Timeline, reports: list[Report]) -> None:
    with timeline.phase("write"):
        results = manager.record(reports)
    with timeline.phase("strategy"):
        manager.tell(results)
        say(manager.progress_line())


def _remaining_s(deadline_s: float | None, sent_s: float) -> float | None:
    """What is left of a deadline counted from ``sent_s``; rank 0 measured a chunk of its own
    meanwhile, and a report that is already there must still be looked for."""
    if deadline_s is None:
        return None
    return max(deadline_s - (time.monotonic() - sent_s), _LAST_LOOK_S)


def _abandon(silent: SilentRanks, rank: int, path: str) -> None:
    """End every rank now, with ``EXIT_RESUMABLE``: a rank that does not answer cannot take
    part in a clean stop, and the launcher would wait for it, so this goes through MPI_Abort
    (the path the command line takes for a crash). One line says why: rank 0's on stderr, a
    worker's in its log; MPICH's own line about the abort is kept off this rank's stderr."""
    if rank == 0:
        if silent.error:
            expected = f"MPI reported: {silent.error}"
        elif silent.expected_s is None:
            expected = "its batch had no history yet"
        elif silent.expected_s == 0:
            expected = "after the last batch, when only its last timeline rows were due"
        else:
            expected = f"its batch was expected to take {_seconds(silent.expected_s)} s"
        print(
            f"mpitune: error: {who(silent.ranks, silent.hosts)} did not answer within {_seconds(silent.waited_s)} s "
            f"({expected}); results so far are saved in {path}; rerun the same command to resume "
            f"(exit code {EXIT_RESUMABLE})",
            file=sys.stderr,
            flush=True,
        )
    else:
        log.error(
            "rank 0 on %s sent nothing for %s s after this rank's report, longer than its batch may take%s: "
            "it is lost or stopped; ending the job (exit code %d)",
            silent.hosts[0],
            _seconds(silent.waited_s),
            f" (MPI reported: {silent.error})" if silent.error else "",
            EXIT_RESUMABLE,
        )
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(_FORWARD_S)
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
    MPI.COMM_WORLD.Abort(EXIT_RESUMABLE)
    os._exit(EXIT_RESUMABLE)  # should the abort return before the launcher ends this rank


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f}" if seconds < 10 else f"{seconds:.0f}"


@contextmanager
def _stop_requests(manager: Manager | None) -> Iterator[None]:
    """SIGINT (Ctrl-C), SIGTERM and SIGUSR1 (what Slurm sends before a job's end, with ``--signal``)
    ask rank 0 to stop handing out batches; the batch in flight finishes and is recorded. Other
    ranks ignore them so that they can finish their chunk and hear the stop from rank 0. A second
    Ctrl-C on rank 0 stops at once (see ``_SecondInterrupt``)."""

    def handler(signum, frame):
        if manager:
            manager.stop_requested = StopReason.SIGNAL
            log.warning(
                "received %s: finishing the batch in flight, then stopping%s",
                signal.Signals(signum).name,
                " (Ctrl-C again to stop at once)" if signum == signal.SIGINT else "",
            )

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    second = _SecondInterrupt() if manager else None
    try:
        yield
    finally:
        if second:
            second.close()
        for sig, old in previous.items():
            signal.signal(sig, old)


class _SecondInterrupt:
    """Rank 0 spends most of a batch inside MPI calls, where Python's signal handlers do not run
    until the call returns; so a thread watches the signal wakeup socket and, on a second SIGINT,
    ends the job at once with ``EXIT_INTERRUPTED``. Every batch recorded so far is on disk (the
    file is flushed per batch); the batch in flight is lost and the next run (or ``check``) marks
    the run killed. SIGINTs within ``SAME_PRESS_S`` of the first count as one: a Ctrl-C in a
    terminal reaches rank 0 from the terminal and again from the launcher forwarding it."""

    SAME_PRESS_S = 0.5

    def __init__(self) -> None:
        self._read, self._write = socket.socketpair()
        self._write.setblocking(False)
        self._previous_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="mpitune-interrupts", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        first: float | None = None
        while True:
            try:
                received = self._read.recv(64)
            except OSError:
                return
            if not received:
                return  # closed: the run is over
            if signal.SIGINT not in received:
                continue
            now = time.monotonic()
            if first is None:
                first = now
            elif now - first > self.SAME_PRESS_S:
                print(
                    "mpitune: error: interrupted twice: stopping now; every batch before the one in flight is "
                    f"recorded, run the same command again to resume (exit code {EXIT_INTERRUPTED})",
                    file=sys.stderr,
                    flush=True,
                )
                MPI.COMM_WORLD.Abort(EXIT_INTERRUPTED)

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous_fd)
        self._write.close()
        self._read.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=1.0)
        self._read.close()
