"""Runs a rank's backend in a worker process it supervises, with a deadline per configuration.

A kernel under tuning may hang, crash its process or poison its CUDA context. A crash is a
segfault in C, or an illegal address on a GPU. Run in the rank's own process, any of these would
stop the rank, and with it the job. Here the backend lives in a supervised child process
(supervisor.py), started once and reused. The rank sends it one configuration at a time and
waits with a deadline. A configuration that overruns it is a ``timeout``, one whose worker
dies a ``runtime_error``. The worker is restarted (arguments uploaded again) before the rank
goes on. This is the rank's side; the worker's loop and the messages between them are worker.py.

Starting a worker costs a fresh Python, its imports and, on a GPU, CuPy and the CUDA context.
That takes seconds, and none of it needs the problem. So a worker is spawned for a backend and a
device alone (prewarm.py). It warms them up (``backends.prewarm``) and only then waits for its
problem. A rank may spawn it long before the problem exists: scheduling/before_mpi.py starts it
before MPI. The problem travels through the pipe while the worker still warms up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler, send_handle

from mpitune.backends.base import Backend, Compiled, Compiler, unlaunched
from mpitune.errors import UserError
from mpitune.model.judging.racing import Race
from mpitune.model.problem import Kernel
from mpitune.model.result import Result, Status
from mpitune.model.timeline import Clock, PhaseRow, Timeline
from mpitune.model.work import Launch, Retime, Work
from mpitune.process.deadline import Durations, config_limit_s
from mpitune.process.prewarm import Spawned, spawn_worker
from mpitune.process.shared_arrays import Shared, share
from mpitune.process.supervisor import EXIT_CODE_S, Death, Hang, Patience
from mpitune.process.worker import Confirm, Confirmed, Cut, Measure, Measured, Start, StartFailed, Stop, Warm

log = logging.getLogger(__name__)

STOP_WAIT_S = 1.0  # how long a worker told to stop may take before it is killed
CUT_LOOK_S = 0.05  # how often a rank whose worker re-times asks whether the run is ending
STARTUP_TIMEOUT_S = 300.0  # importing CuPy and uploading large arguments can take a while
# The timeline's background phase of a worker's own start: from its spawn to its backend
# imported and its device context made, before and beside the rank's start-up phases.
WORKER_START_PHASE = "worker_start"


def _send_quietly(conn: Connection, pickled: bytes, shared: Shared | None) -> None:
    """Send from a thread of its own, so the rank meanwhile waits for the worker with a deadline.

    A worker that dies or is killed first closes the pipe. The memory file's descriptor follows
    the pickle. It is closed here once sent; the worker holds its own.
    """
    try:
        conn.send_bytes(pickled)  # what ``conn.send`` writes, read by the worker's ``recv``
        if shared is not None:
            send_handle(conn, shared.fd, 0)  # the pid is Windows' concern
    except OSError:  # the rank's receive reports the death
        log.debug("the worker went away before it took its problem", exc_info=True)
    finally:
        if shared is not None:
            shared.close()


class IsolatedBackend(Backend):
    """The rank's side: same interface as a backend, measured in a supervised worker."""

    def __init__(
        self,
        problem: Kernel,
        workdir: str,
        clock: Clock,
        timeout_s: float | None = None,
        local_rank: int = 0,
        spawned: Spawned | None = None,
        timeline: Timeline | None = None,
    ):
        """``spawned``: a worker started early for this problem's backend and device.

        scheduling/before_mpi.py decides that it is, and it is given the problem now. None: one is
        spawned here. The worker's own start goes to ``timeline`` as a background phase.
        """
        self.problem = problem
        self.workdir = workdir
        self.clock = clock
        self.local_rank = local_rank
        self.timeout_s = timeout_s
        self.config_s = Durations()  # how long measured configurations took, for the deadline
        self.restarts = 0
        self._start(spawned, timeline)

    def _start(self, spawned: Spawned | None = None, timeline: Timeline | None = None) -> None:
        if spawned is None:
            spawned = spawn_worker(self.problem.lang, self.local_rank)
        self.worker, self.conn = spawned.supervisor, spawned.conn
        # Pickled here, where a problem that cannot be raises at once, as a spawn's arguments did;
        # its large arrays go in shared memory.
        problem, shared = share(self.problem)
        start = Start(problem, self.workdir, self.clock.origin, self.local_rank, shared.size if shared else 0)
        try:
            pickled = ForkingPickler.dumps(start)
        except BaseException:
            if shared is not None:
                shared.close()
            raise
        threading.Thread(
            target=_send_quietly, args=(self.conn, pickled, shared), name="mpitune-send-problem", daemon=True
        ).start()
        try:
            patience = Patience(STARTUP_TIMEOUT_S)
            warm: Warm = self.worker.receive(self.conn, patience)
            message = self.worker.receive(self.conn, patience)
        except Hang:
            self._kill()
            raise UserError(f"the worker process did not start within {STARTUP_TIMEOUT_S:.0f} s") from None
        except Death as death:
            raise UserError(f"the worker process died while starting ({death})") from None
        if timeline is not None:
            origin = self.clock.origin
            timeline.extend(
                [PhaseRow(timeline.batch, -1, WORKER_START_PHASE, spawned.spawned_at - origin, warm.at - origin)]
            )
        if isinstance(message, StartFailed):
            self.worker.join(EXIT_CODE_S)
            raise UserError(message.error)
        log.info(
            "worker process %d ready %.2f s after its spawn (warm after %.2f s): %s",
            message.pid,
            time.perf_counter() - spawned.spawned_at,
            warm.at - spawned.spawned_at,
            message.device_detail or message.device_name,
        )
        self.device_name = message.device_name
        self.device_detail = message.device_detail
        self._compiler = message.compiler

    def compiler(self) -> Compiler | None:
        return self._compiler

    def deadline_s(self) -> float:
        return config_limit_s(self.timeout_s, self.config_s, self.problem.iterations)

    def run(self, work: Work, timeline: Timeline, compiled: Compiled | None = None, race: Race | None = None) -> Result:
        config_id = work.config_id
        deadline_s = self.deadline_s()
        start_s = self.clock.now()
        self.conn.send(Measure(work, compiled, race))
        try:
            measured: Measured = self.worker.receive(self.conn, Patience(deadline_s))
        except Hang:
            return self._lost(
                config_id,
                timeline,
                start_s,
                Status.TIMEOUT,
                f"no result after {deadline_s:.1f} s (the limit for one configuration)",
            )
        except Death as death:
            return self._lost(
                config_id,
                timeline,
                start_s,
                Status.RUNTIME_ERROR,
                f"the worker process died while running this configuration ({death})",
            )
        timeline.extend(measured.rows)
        self.config_s.append(self.clock.now() - start_s)
        if measured.fatal_error:
            self._restart(timeline, config_id)
        return measured.result

    def retime(
        self,
        retime: Retime,
        timeline: Timeline,
        compiled: Mapping[int, Compiled] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> list[Launch]:
        """Forwarded to the worker, whose deadline is the per-configuration limit per candidate.

        Each candidate is compiled, loaded and launched a few times, as one configuration is. A
        worker that overruns or dies costs every launch (NaN). It is restarted, as a
        configuration's would be. Which candidate hung cannot be told from here. ``stopping()``
        is asked every ``CUT_LOOK_S``. Once it says the run is ending, the worker is told to
        ``Cut``. It answers with the launches it made.
        """
        deadline_s = self.deadline_s() * max(1, len(retime.work))
        start_s = self.clock.now()
        try:
            self.conn.send(Confirm(retime, None if compiled is None else dict(compiled)))
            confirmed: Confirmed = self._confirmed(Patience(deadline_s), stopping)
        except OSError as exc:  # the worker went away before it took the order
            why = f"the worker process was gone ({exc})"
        except Hang:
            why = f"no launches after {deadline_s:.1f} s (the limit for {len(retime.work)} configurations)"
        except Death as death:
            why = f"the worker process died while re-timing ({death})"
        else:
            timeline.extend(confirmed.rows)
            if confirmed.fatal_error:
                self._restart(timeline, -1)
            return confirmed.launches
        timeline.extend([PhaseRow(timeline.batch, -1, "lost", start_s, self.clock.now())])
        log.warning("re-timing %d candidates: %s; restarting the worker", len(retime.work), why)
        self._restart(timeline, -1)
        return unlaunched(retime)

    def _confirmed(self, patience: Patience, stopping: Callable[[], bool] | None) -> Confirmed:
        """The answer to a ``Confirm`` within ``patience``; the worker is told to ``Cut`` when ``stopping()``."""
        if stopping is None:
            return self.worker.receive(self.conn, patience)
        cut = False
        while True:
            look = Patience(min(CUT_LOOK_S, patience.limit_s or CUT_LOOK_S))
            try:
                return self.worker.receive(self.conn, look)
            except Hang:
                patience.waited_s += look.waited_s
                if patience.limit_s is not None and patience.waited_s >= patience.limit_s:
                    raise Hang(patience.limit_s) from None
            if not cut and stopping():
                self.conn.send(Cut())
                cut = True

    def _lost(self, config_id: int, timeline: Timeline, start_s: float, status: Status, why: str) -> Result:
        """Record the configuration the worker never answered for, then start a fresh worker."""
        timeline.extend([PhaseRow(timeline.batch, config_id, "lost", start_s, self.clock.now())])
        log.warning("configuration %d: %s; restarting the worker", config_id, why)
        self._restart(timeline, config_id)
        return Result(config_id, status, error=f"{why}; the worker was restarted")

    def _restart(self, timeline: Timeline, config_id: int) -> None:
        self._kill()
        self.restarts += 1
        with timeline.phase("restart", config_id):
            self._start(timeline=timeline)

    def _kill(self) -> None:
        self.worker.kill()
        self.conn.close()

    def close(self) -> None:
        """Stop the worker, and kill it if it does not stop within ``STOP_WAIT_S``.

        A worker may still be measuring when the job ends for a silent rank (rank 0's lane,
        scheduling/rank.py). It would hold the rank past the point where its peers judge it lost.
        """
        try:
            self.conn.send(Stop())
            self.worker.join(STOP_WAIT_S)
        except (BrokenPipeError, OSError):
            pass
        self._kill()
