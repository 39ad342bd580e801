"""The worker process's side of isolation: the messages it takes and answers, and its loop.

The rank's side is ``IsolatedBackend`` (isolation.py). It sends these messages and waits for
the answers with a deadline. The worker is spawned for a backend and a device alone
(prewarm.py). It warms them up (``backends.prewarm``) and only then waits for its problem. The
problem travels through the pipe while the worker still warms up.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle

from mpitune import backends
from mpitune.backends.base import Compiled, Compiler
from mpitune.errors import UserError
from mpitune.model.judging.racing import Race
from mpitune.model.problem import Kernel
from mpitune.model.result import Result
from mpitune.model.timeline import Clock, PhaseRow, Timeline
from mpitune.model.work import Launch, Retime, Work
from mpitune.process.shared_arrays import attach_arrays

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Start:
    """The worker's problem, with what it needs to build its backend and share the rank's clock."""

    problem: Kernel
    workdir: str
    origin: float
    local_rank: int
    # The memory file holding the problem's large arrays (shared_arrays.py), whose descriptor
    # follows this message; 0: every array is in the pickle.
    shared_bytes: int = 0


@dataclass(frozen=True)
class Warm:
    """The worker is up, its backend imported and its device context made.

    ``at`` is its ``time.perf_counter()`` then; the monotonic clock is one per machine.
    """

    pid: int
    at: float


@dataclass(frozen=True)
class Ready:
    """The worker's backend is prepared: what the rank reports about its device."""

    device_name: str
    device_detail: str
    compiler: Compiler | None
    pid: int


@dataclass(frozen=True)
class StartFailed:
    """The backend could not be built or prepared: a user's message, or a traceback."""

    error: str


@dataclass(frozen=True)
class Measure:
    """Measure one configuration (``Backend.run``)."""

    work: Work
    compiled: Compiled | None
    race: Race | None = None


@dataclass(frozen=True)
class Confirm:
    """Time the candidates of ``retime`` again, interleaved (``Backend.retime``)."""

    retime: Retime
    compiled: Mapping[int, Compiled] | None = None


@dataclass(frozen=True)
class Stop:
    """Close the backend and end."""


@dataclass(frozen=True)
class Cut:
    """The run is ending: a worker that re-times answers with the launches made so far."""


@dataclass(frozen=True)
class Measured:
    """One configuration's result and the timeline rows it produced in the worker.

    ``fatal_error`` is set when the worker's device can no longer be trusted.
    """

    result: Result
    rows: list[PhaseRow]
    fatal_error: str


@dataclass(frozen=True)
class Confirmed:
    """The launches of a ``Confirm`` and the timeline rows they produced in the worker.

    ``fatal_error`` is as in ``Measured``.
    """

    launches: list[Launch]
    rows: list[PhaseRow]
    fatal_error: str


def worker_loop(conn: Connection, lang: str, local_rank: int | None) -> None:
    """The worker, which prewarm.py spawns.

    It warms up the backend ``lang`` names on the device of ``local_rank`` (None: no device
    yet). Meanwhile its problem may still be on its way. It builds the backend once. Then it
    measures what the rank sends until told to stop.
    """
    inbox: queue.Queue = queue.Queue(maxsize=1)
    # The problem (arrays of hundreds of MB) is read while the device warms up; the warm-up
    # stays in the main thread, whose current CUDA device is the one the backend uses.
    threading.Thread(target=_receive_start, args=(conn, inbox), name="mpitune-problem", daemon=True).start()
    caps = backends.resolve(lang)
    try:
        if caps is not None:
            backends.prewarm(caps.lang, local_rank)
    except Exception:  # only a head start: creating the backend reports what is wrong
        log.debug("warming up the %s backend failed", lang, exc_info=True)
    conn.send(Warm(os.getpid(), time.perf_counter()))
    start = inbox.get()
    if isinstance(start, StartFailed):
        conn.send(start)
        return
    if not isinstance(start, Start):  # the rank is gone, or ended the worker before its problem came
        return
    try:
        backend = backends.create(start.problem, start.workdir, start.local_rank)
        backend.prepare()
    except UserError as exc:
        conn.send(StartFailed(str(exc)))
        return
    except Exception:
        conn.send(StartFailed(traceback.format_exc()))
        return
    conn.send(Ready(backend.device_name, backend.device_detail, backend.compiler(), os.getpid()))
    timeline = Timeline(Clock(origin=start.origin), fill_gaps=False)
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the rank is gone: nothing left to measure for
            return
        if isinstance(message, Stop):
            break
        if isinstance(message, Cut):  # came after the re-timing it would have cut had ended
            continue
        if isinstance(message, Confirm):  # whatever comes meanwhile (a Cut, a Stop) ends it
            launches = backend.retime(message.retime, timeline, message.compiled, conn.poll)
            conn.send(Confirmed(launches, timeline.take(), backend.fatal_error))
        else:
            result = backend.run(message.work, timeline, message.compiled, message.race)
            conn.send(Measured(result, timeline.take(), backend.fatal_error))
        if backend.fatal_error:
            return  # its context is gone: the rank starts a fresh worker
    backend.close()


def _receive_start(conn: Connection, inbox: queue.Queue) -> None:
    """Put the rank's first message in ``inbox``, with its shared arrays attached.

    A pipe closed before it came puts ``Stop``; anything else that fails, ``StartFailed``.
    """
    try:
        message = conn.recv()
        if isinstance(message, Start) and message.shared_bytes:
            fd = recv_handle(conn)
            message = replace(message, problem=attach_arrays(message.problem, fd, message.shared_bytes))
        inbox.put(message)
    except EOFError:
        inbox.put(Stop())
    except Exception:
        inbox.put(StartFailed(traceback.format_exc()))
