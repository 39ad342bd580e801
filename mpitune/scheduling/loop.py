"""The scheduler: rank 0 manages the search, every rank (rank 0 too) measures.

One round: rank 0's Manager makes one ``Order`` per rank (a chunk of configuration ids), the
transport scatters them; each rank runs its chunk on its own backend (in a supervised worker
process, see isolation.py) and answers with a ``Report`` (results and timeline rows), gathered
at rank 0, which writes them to the cache, tells the strategy and prints a progress line.
An order to stop ends every rank, with the exit code of its reason.
"""

from __future__ import annotations

import logging
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
from mpitune.errors import UserError
from mpitune.model.problem import Problem, RunSettings
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import Clock, Timeline
from mpitune.process.compile_ahead import CompileAhead, default_workers
from mpitune.process.isolation import IsolatedBackend
from mpitune.scheduling.comm import MPI, MpiTransport
from mpitune.scheduling.manager import Manager, Setup
from mpitune.scheduling.messages import Placement, StopReason
from mpitune.scheduling.rank import serve
from mpitune.scheduling.session import cpu_oversubscribed, finish, open_run, prepare, refuse, say
from mpitune.scheduling.transport import Transport, first_error

__all__ = ["EXIT_INTERRUPTED", "MPI", "tune"]  # the command line reads the rank from MPI and aborts through it

# A job ended by a second Ctrl-C, or by one before tuning began: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130

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
            stop = _rounds(transport, manager, backend, space, timeline, ahead)
        if manager:
            finish(manager, timeline)
        return stop.exit_code
    finally:
        if ahead is not None:
            ahead.close()
        if backend is not None:
            backend.close()
        shutil.rmtree(workdir, ignore_errors=True)


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
    """Rounds until rank 0 says stop; returns why it did."""
    while True:
        orders = None
        if manager:
            with timeline.phase("strategy"):
                orders = manager.next_orders()
        with timeline.phase("wait"):
            order = transport.scatter(orders)
            timeline.clock.sync(order.now_s)
        if order.stop is not None:
            break
        report = serve(order, backend, space, transport.rank, timeline, ahead)
        with timeline.phase("wait"):
            reports = transport.gather(report)
            if manager:
                assert reports is not None
                timeline.clock.sync(max(r.now_s for r in reports))
        if manager:
            assert reports is not None
            with timeline.phase("write"):
                results = manager.record(reports)
            with timeline.phase("strategy"):
                manager.tell(results)
                say(manager.progress_line())
    # The last rows of every rank (their final waits) reach rank 0 with one more gather.
    leftovers = transport.gather(timeline.take())
    if manager:
        assert leftovers is not None
        manager.cache.append_phases([(r, p) for r, rows in enumerate(leftovers) for p in rows])
    return order.stop


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
