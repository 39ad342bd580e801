"""Runs a rank's backend in a worker process it supervises, with a deadline per configuration.

A kernel under tuning may hang, crash its process (a segfault in C, an illegal address on a
GPU) or poison its CUDA context. Run in the rank's own process, any of these would stop the
rank, and with it the job. Here the backend lives in a child process, started once with
"spawn" (fork is unsafe after MPI and CUDA are initialised) and reused; the rank sends it one
configuration at a time and waits with a deadline. A configuration that overruns it is
recorded as ``timeout``, one whose worker dies as ``runtime_error``, and the worker is
restarted (arguments uploaded again) before the rank goes on.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import statistics
import traceback
from multiprocessing.connection import Connection

from mpitune import backends
from mpitune.backends.base import Backend, Compiled, Compiler
from mpitune.errors import UserError
from mpitune.model.kernel_extras import Derived
from mpitune.model.result import RUNTIME_ERROR, TIMEOUT, Result
from mpitune.model.timeline import Clock, PhaseRow, Timeline

log = logging.getLogger(__name__)

# Without a timeout in the spec: this many times the median time of a configuration so far,
# and never less than the floor (the first configurations also warm up compilers and caches).
TIMEOUT_FACTOR = 20
TIMEOUT_FLOOR_S = 30.0
STARTUP_TIMEOUT_S = 300.0  # importing CuPy and uploading large arguments can take a while


def _serve(conn: Connection, problem, workdir: str, origin: float, local_rank: int) -> None:
    """The worker: build the backend once, then measure what the rank sends until told to stop."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)  # stopping is the rank's decision, not the worker's
    try:
        backend = backends.create(problem, workdir, local_rank)
        backend.prepare()
    except UserError as exc:
        conn.send(("error", str(exc)))
        return
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", backend.device_name, backend.device_detail, backend.compiler()))
    timeline = Timeline(Clock(origin=origin), fill_gaps=False)
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the rank is gone (killed): nothing left to measure for
            return
        if message[0] == "stop":
            break
        _, config_id, config, derived, compiled = message
        result = backend.run(config_id, config, timeline, derived, compiled)
        conn.send(("result", result, timeline.take(), backend.fatal_error))
        if backend.fatal_error:
            return  # its context is gone: the rank starts a fresh worker
    backend.close()


class IsolatedBackend(Backend):
    """The rank's side: same interface as a backend, measured in a supervised worker."""

    def __init__(self, problem, workdir: str, clock: Clock, timeout_s: float | None = None, local_rank: int = 0):
        self.problem, self.workdir, self.clock, self.local_rank = problem, workdir, clock, local_rank
        self.timeout_s = timeout_s
        self.config_s: list[float] = []  # how long measured configurations took, for the deadline
        self.restarts = 0
        self._context = multiprocessing.get_context("spawn")
        self._start()

    def _start(self) -> None:
        ours, theirs = self._context.Pipe()
        self.process = self._context.Process(
            target=_serve, args=(theirs, self.problem, self.workdir, self.clock.origin, self.local_rank),
            name="mpitune-worker", daemon=True)
        self.process.start()
        theirs.close()
        self.conn = ours
        if not self.conn.poll(STARTUP_TIMEOUT_S):
            self._kill()
            raise UserError(f"the worker process did not start within {STARTUP_TIMEOUT_S:.0f} s")
        try:
            message = self.conn.recv()
        except EOFError:
            raise UserError(f"the worker process died while starting ({self._death()})") from None
        if message[0] == "error":
            self.process.join(5)
            raise UserError(message[1])
        _, self.device_name, self.device_detail, self._compiler = message

    def compiler(self) -> Compiler | None:
        return self._compiler

    def deadline_s(self) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        if not self.config_s:
            return TIMEOUT_FLOOR_S
        return max(TIMEOUT_FLOOR_S, TIMEOUT_FACTOR * statistics.median(self.config_s))

    def run(self, config_id: int, config: dict, timeline: Timeline, derived: Derived | None = None,
            compiled: Compiled | None = None) -> Result:
        deadline_s = self.deadline_s()
        start_s = self.clock.now()
        self.conn.send(("run", config_id, config, derived, compiled))
        if self.conn.poll(deadline_s):
            try:
                _, result, rows, fatal = self.conn.recv()
            except EOFError:
                return self._lost(config_id, timeline, start_s, RUNTIME_ERROR,
                                  f"the worker process died while running this configuration ({self._death()})")
            timeline.extend(rows)
            self.config_s.append(self.clock.now() - start_s)
            if fatal:
                self._restart(timeline, config_id)
            return result
        return self._lost(config_id, timeline, start_s, TIMEOUT,
                          f"no result after {deadline_s:.1f} s (the limit for one configuration)")

    def _lost(self, config_id: int, timeline: Timeline, start_s: float, status: str, why: str) -> Result:
        """Record the configuration the worker never answered for, then start a fresh worker."""
        timeline.extend([PhaseRow(timeline.batch, config_id, "lost", start_s, self.clock.now())])
        log.warning("configuration %d: %s; restarting the worker", config_id, why)
        self._restart(timeline, config_id)
        return Result(config_id, status, error=f"{why}; the worker was restarted")

    def _restart(self, timeline: Timeline, config_id: int) -> None:
        self._kill()
        self.restarts += 1
        with timeline.phase("restart", config_id):
            self._start()

    def _death(self) -> str:
        self.process.join(5)
        code = self.process.exitcode
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def _kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.conn.close()

    def close(self) -> None:
        try:
            self.conn.send(("stop",))
            self.process.join(10)
        except (BrokenPipeError, OSError):
            pass
        self._kill()

