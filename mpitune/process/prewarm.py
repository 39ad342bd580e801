"""Spawning a rank's measuring worker before its problem exists, at the cost of nothing heavy.

The worker (worker.py) needs its problem only after its own start. That start is a fresh
Python, numpy, the backend, and on a GPU CuPy and the CUDA context. So a rank spawns it first,
as early as it can: before MPI, before the spec (scheduling/before_mpi.py). This module is what that
spawn costs the rank. It is the supervisor and nothing of numpy, the backends or the model. The
worker imports those itself, in its own process, while the rank goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from mpitune.process.supervisor import SPAWN, Supervisor


def _serve(conn: Connection, lang: str, local_rank: int | None) -> None:
    """In the worker: the heavy imports happen here, not in the rank before its spawn.

    A rank may be killed meanwhile: its MPI start watched out, or a launcher's teardown. That
    breaks the pipe. The worker then has no one to answer and ends without a word. A traceback
    would land on the job's stderr, where a launcher that leaves a rank's children running
    shows it."""
    from mpitune.process.worker import worker_loop

    try:
        worker_loop(conn, lang, local_rank)
    except (BrokenPipeError, ConnectionResetError):
        return


@dataclass
class Spawned:
    """A worker process started for a backend and a device, not yet given its problem."""

    supervisor: Supervisor
    conn: Connection
    lang: str  # as given: a spec's spelling, or a backend's recorded name
    local_rank: int | None  # the device it warms up (None: none yet)
    spawned_at: float  # time.perf_counter() just before the spawn

    @property
    def pid(self) -> int:
        return self.supervisor.pids[0] if self.supervisor.pids else 0

    def end(self) -> None:
        """Kill it and reap it.

        It holds nothing that needs a goodbye: no problem, no kernel."""
        self.supervisor.kill()
        self.conn.close()


def spawn_worker(lang: str, local_rank: int | None) -> Spawned:
    """Start a worker that warms up the backend ``lang`` names, and return at once.

    It warms up on the device of ``local_rank`` (None: imports only). Then it waits for its
    problem."""
    ours, theirs = SPAWN.Pipe()
    supervisor = Supervisor(_serve, ["mpitune-worker"])
    spawned_at = time.perf_counter()
    supervisor.start(theirs, lang, local_rank)
    theirs.close()  # only the worker holds its end: its death closes the pipe
    return Spawned(supervisor, ours, lang, local_rank, spawned_at)
