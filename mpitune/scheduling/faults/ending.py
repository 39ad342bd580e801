"""Ending the job when a rank stops answering: one line, the file closed where that is safe, and
``MPI_Abort`` with ``ExitCode.RESUMABLE``. A silent rank cannot take part in a clean stop, and the
launcher would wait for it.

Two threads of rank 0 can notice, sharing a ``liveness.Watch``. The main thread notices a passed
deadline, or the heartbeat thread's alarm while it waits in a gather; it then records what arrived,
closes the file and aborts (``abandon``). Otherwise the heartbeat thread (heartbeat.py) waits up to
``WRITE_WAIT_S`` for the main thread's write, then closes the file as guard.py's ``arm`` says.
Should the lock stay held, it aborts without closing the file: every batch flushed before is kept,
and the next run repairs the run's row.

Whoever ends the job writes the one line; the other only waits for the abort.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from mpitune.exits import ExitCode
from mpitune.scheduling.faults.aborting import abort_job
from mpitune.scheduling.faults.liveness import Silence, Watch
from mpitune.scheduling.transport import SilentRanks, who
from mpitune.store.custody import CustodyLost

# How long the heartbeat thread gives the main thread to take its alarm in a gather (it looks
# every millisecond), then to end the run itself once it has.
NOTICE_S = 1.0
HANDOVER_S = 10.0
# How long the heartbeat thread waits for the main thread to finish writing the file.
WRITE_WAIT_S = 10.0

_ONE_LINE = threading.Lock()  # taken by the thread that ends the job; the other waits for the abort
_RESUME = f"rerun the same command to resume (exit code {ExitCode.RESUMABLE.value})"  # rank 0's line ends so
_ENDING = f"it is lost or stopped; ending the job (exit code {ExitCode.RESUMABLE.value})"  # and a worker's so

log = logging.getLogger(__name__)


def seconds(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def heard_nothing(silence: Silence) -> str:
    """'rank 2 on node2 sent no heartbeat for 21 s (the liveness timeout is 20 s)'."""
    return (
        f"{who(silence.ranks, silence.hosts)} sent no heartbeat for {seconds(silence.longest_s)} s "
        f"(the liveness timeout is {seconds(silence.timeout_s)} s)"
    )


def rank0_line(silent: SilentRanks, path: str) -> str:
    """Rank 0's one line when the main thread ends the run, the file closed."""
    if silent.heartbeat is not None:
        what = f"{heard_nothing(silent.heartbeat)}: it is stopped or its node is lost"
    else:
        if silent.error:
            expected = f"MPI reported: {silent.error}"
        elif silent.expected_s is None:
            expected = "its batch had no history yet"
        elif silent.expected_s == 0:
            expected = "after the last batch, when only its last timeline rows were due"
        else:
            expected = f"its batch was expected to take {seconds(silent.expected_s)} s"
        what = f"{who(silent.ranks, silent.hosts)} did not answer within {seconds(silent.waited_s)} s ({expected})"
    return f"mpitune: error: {what}; results so far are saved in {path}; {_RESUME}"


def abandon(silent: SilentRanks, rank: int, path: str) -> NoReturn:
    """The main thread ends every rank for a silent one: rank 0's line on stderr, a worker's in its
    log."""
    if rank == 0:
        line = rank0_line(silent, path)
    else:
        line = (
            f"rank 0 on {silent.hosts[0]} sent nothing for {seconds(silent.waited_s)} s after this rank's report, "
            f"longer than its batch may take"
            + (f" (MPI reported: {silent.error})" if silent.error else "")
            + f": {_ENDING}"
        )
    _end(line, on_stderr=rank == 0)


def on_rank0(watch: Watch, abort: Callable[[str], None] | None = None) -> Callable[[Silence], None]:
    """What rank 0's heartbeat thread does when a worker is silent (the module's docstring says
    how). ``abort(line)`` ends the job; tests pass their own."""
    finish = abort or _end

    def alarm(silence: Silence) -> None:
        watch.silence = silence
        # A main thread waiting in a gather takes the alarm at its next look, a millisecond on.
        if watch.ending or (watch.polling and _within(NOTICE_S, lambda: watch.ending)):
            _within(HANDOVER_S, lambda: False)  # it ends the job; should it not, this thread does
        finish(rank0_silence_line(silence, watch))

    return alarm


def rank0_silence_line(silence: Silence, watch: Watch) -> str:
    """Close the file if the main thread lets go of it in time; the line that says what was kept."""
    if not watch.writing.acquire(timeout=WRITE_WAIT_S):  # held for good: the job is ending
        kept = f"every batch before the one in flight is saved in {watch.path}, which the next run repairs"
    elif watch.close is None:
        return f"mpitune: error: {heard_nothing(silence)} during start-up, before anything was recorded; {_RESUME}"
    else:
        kept = f"results so far are saved in {watch.path} (the batch in flight is measured again)"
        if not watch.closed:
            try:
                watch.close()
                watch.closed = True
            except CustodyLost as lost:  # the path no longer names the file: its rows went beside it
                watch.closed = True
                kept = str(lost)
            except Exception as exc:  # the file's last write failed: what was flushed before is kept
                log.error("could not close %s: %s", watch.path, exc)
    return f"mpitune: error: {heard_nothing(silence)}: it is stopped or its node is lost; {kept}; {_RESUME}"


def on_worker(silence: Silence) -> None:
    """What a worker's heartbeat thread does when rank 0 is silent: one line in its log, and the job
    ends. Rank 0's node is lost or rank 0 stopped: nothing would tell this rank more."""
    _end(f"{heard_nothing(silence)}: {_ENDING}", False)


def _within(limit_s: float, done: Callable[[], bool]) -> bool:
    """Wait up to ``limit_s`` for ``done()``; whether it came."""
    until = time.monotonic() + limit_s
    while not done():
        if time.monotonic() >= until:
            return False
        time.sleep(0.01)
    return True


def _end(line: str, on_stderr: bool = True) -> NoReturn:
    """Write ``line`` (rank 0's on stderr, else in this rank's log) and end every rank with
    ``ExitCode.RESUMABLE``. Where another thread of this rank is already ending the job, wait for
    its abort instead."""
    if not _ONE_LINE.acquire(blocking=False):
        time.sleep(HANDOVER_S + WRITE_WAIT_S)  # the other thread's abort ends this process first
        os._exit(ExitCode.RESUMABLE)
    if not on_stderr:
        log.error("%s", line)
    abort_job(ExitCode.RESUMABLE, line if on_stderr else None)
