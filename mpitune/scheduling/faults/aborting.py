"""Ending every rank at once with one last line: what each ``MPI_Abort`` of mpitune goes through.

The launcher forwards a rank's stderr on its own schedule, and ``MPI_Abort`` has it kill the
job; a line written just before the abort is lost unless the launcher is given a moment to pass
it on (MPICH's mpiexec dropped one about one time in three, Open MPI's mpirun the second
Ctrl-C's line on a loaded machine). Then this rank's stderr goes to /dev/null, so that the MPI
library's own report of the abort does not follow the one line.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import NoReturn

from mpitune.scheduling.comm import MPI

# What the launcher is given to forward this rank's last lines before MPI_Abort ends it.
FORWARD_S = 0.2
# How long MPI_Abort may take before this rank ends itself: with rank 0's node lost, the abort
# can wait for a launcher that is gone, and a rank left running holds its GPU.
ABORT_WAIT_S = 5.0


def abort_job(code: int, line: str | None = None) -> NoReturn:
    """Write ``line`` (if any) on stderr, give the launcher ``FORWARD_S`` to forward it and what
    came before, and end every rank with exit code ``code``."""
    if line is not None:
        print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(FORWARD_S)
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
    threading.Timer(ABORT_WAIT_S, os._exit, args=(code,)).start()
    MPI.COMM_WORLD.Abort(code)
    os._exit(code)  # should the abort return before the launcher ends this rank
