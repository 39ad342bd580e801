"""Ending every rank at once with one last line, and the exit code of each failure of a rank's run.
A line written just before ``MPI_Abort`` is lost unless the launcher gets a moment to forward it
(MPICH's mpiexec often dropped it). Then stderr goes to /dev/null, so that the MPI library's own
report of the abort does not follow the one line."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any, NoReturn

from mpitune.exits import ExitCode
from mpitune.scheduling.comm import MPI
from mpitune.store.custody import CustodyLost
from mpitune.store.files import cannot_write, refused_write

# What the launcher is given to forward this rank's last lines before MPI_Abort ends it.
FORWARD_S = 0.2
# How long MPI_Abort may take before this rank ends itself: with rank 0's node lost, the abort
# can wait for a launcher that is gone, and a rank left running holds its GPU.
ABORT_WAIT_S = 5.0


def abort_job(code: int, line: str | None = None) -> NoReturn:
    """Write ``line`` (if any) on stderr and end every rank with exit code ``code``. The launcher
    first gets ``FORWARD_S`` to forward it and what came before."""
    if line is not None:
        print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(FORWARD_S)
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
    threading.Timer(ABORT_WAIT_S, os._exit, args=(code,)).start()
    MPI.COMM_WORLD.Abort(code)
    os._exit(code)  # should the abort return before the launcher ends this rank


def abort_for(exc: BaseException, rank: int) -> NoReturn:
    """End every rank for what ended this rank's run: a Ctrl-C outside the rounds, a write the
    system refused, a results file lost to other hands (store/custody.py), each with its line and
    exit code. Anything else is a bug or a crash: the others would wait for it forever."""
    if isinstance(exc, CustodyLost):
        abort_job(ExitCode.CANNOT_WRITE, f"mpitune: error: {exc} (exit code {ExitCode.CANNOT_WRITE.value})")
    if isinstance(exc, KeyboardInterrupt):
        abort_job(
            ExitCode.INTERRUPTED,
            f"mpitune: error: interrupted on rank {rank}; every finished batch is recorded "
            f"(exit code {ExitCode.INTERRUPTED.value})",
        )
    refused = refused_write(exc)
    if refused:
        abort_job(
            ExitCode.CANNOT_WRITE,
            f"mpitune: error: {refused.line}; whatever was recorded before is kept: {refused.reason.remedy} "
            f"(exit code {ExitCode.CANNOT_WRITE.value})",
        )
    logging.getLogger("mpitune").critical("rank %d failed; aborting the job", rank, exc_info=exc)
    abort_job(ExitCode.FAILED)


def quiet_failed_writes(unraisable: Any) -> None:
    """A ``sys.unraisablehook`` that sends h5py's repeats of a failed write to the debug log. After
    a full disk, h5py's freed objects repeat the failure from their destructors. ``abort_for``
    reports that failure once, in one line."""
    if cannot_write(unraisable.exc_value):
        logging.getLogger("mpitune").debug("ignored in %r: %s", unraisable.object, unraisable.exc_value)
    else:
        sys.__unraisablehook__(unraisable)
