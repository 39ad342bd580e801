"""A watch on MPI's start, from outside the rank: a rank stopped or lost before ``MPI_Init`` holds
every other rank in theirs, forever.

``MPI_Init`` holds the interpreter, so no thread or signal handler of a waiting rank runs, and the
heartbeats start only once MPI is up. So each rank first spawns a small watcher process on a pipe.
The rank writes to it once ``MPI_Init`` returned; a rank that dies closes it. Should neither happen
within ``START_TIMEOUT_S`` (``MPITUNE_MPI_START_TIMEOUT_S``; 0: off), the watcher kills its rank,
and the launcher ends the job. Rank 0's watcher first says why, even when rank 0 is the stopped one.
No MPI here: this runs before it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from mpitune.scheduling.faults.liveness import seconds_setting

# Longer than any healthy start: the slowest rank's Python and numpy imports on a cold shared
# file system, and the launcher's wiring of hundreds of ranks, take seconds to tens of seconds.
START_TIMEOUT_S = 120.0
START_TIMEOUT_VARIABLE = "MPITUNE_MPI_START_TIMEOUT_S"

# The watcher: waits for a byte or the end of its stdin (the rank's pipe), else reports and kills.
_WATCHER = """
import os, select, signal, sys
rank_pid, limit_s, line = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ready, _, _ = select.select([0], [], [], limit_s)
if not ready:
    if line:
        os.write(2, (line + "\\n").encode())
    try:
        os.kill(rank_pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


class StartWatch:
    """The watcher of this rank's MPI start; ``end()`` once ``MPI_Init`` has returned, or failed."""

    def __init__(self, world_rank: int | None, environ: dict[str, str] | None = None):
        self.limit_s = seconds_setting(None, START_TIMEOUT_VARIABLE, START_TIMEOUT_S, environ)
        self._process: subprocess.Popen[bytes] | None = None
        if self.limit_s <= 0:
            return
        line = ""
        if world_rank == 0:
            line = (
                f"mpitune: error: MPI did not start within {self.limit_s:.0f} s: a rank was stopped or lost before "
                f"MPI_Init, or never started; ending the job (no results were measured; {START_TIMEOUT_VARIABLE} "
                "sets the limit)"
            )
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHER, str(os.getpid()), str(self.limit_s), line],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the job's process group is the rank's to take
        )

    def end(self) -> None:
        """MPI is up, or its start failed (the rank reports that itself): the watcher leaves."""
        if self._process is None:
            return
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(b"up")
            self._process.stdin.close()
        except OSError:  # BrokenPipeError: it is gone already
            pass
        self._process.wait()
        self._process = None
