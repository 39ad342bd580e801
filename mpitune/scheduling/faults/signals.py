"""Stops a person or Slurm asks for: a first signal stops the hand-outs and keeps what the ranks
measure, a second Ctrl-C on rank 0 ends the job at once."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from mpitune.exits import ExitCode
from mpitune.scheduling.faults.aborting import abort_job
from mpitune.scheduling.manager import Manager
from mpitune.scheduling.messages import StopReason

log = logging.getLogger(__name__)


@contextmanager
def stop_requests(manager: Manager | None) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGUSR1 (Slurm's, with ``--signal``) ask rank 0 to stop handing out work
    (``Manager.request_stop``). Each rank finishes the configuration it measures, and what comes
    back is recorded. Other ranks ignore them, to hear the stop from rank 0. A second Ctrl-C on rank
    0 stops at once (``_SecondInterrupt``)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if manager:
            manager.request_stop(StopReason.SIGNAL)
            log.warning(
                "received %s: finishing what the ranks measure, then stopping%s",
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
    """A thread that ends the job at once on a second SIGINT (``ExitCode.INTERRUPTED``). Rank 0
    spends most of a batch in MPI calls, where Python's signal handlers wait, so it watches the
    signal wakeup socket. What is in flight is lost; the next run marks the run killed. SIGINTs
    within ``SAME_PRESS_S`` count as one: the terminal and the launcher both forward a Ctrl-C."""

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
                abort_job(
                    ExitCode.INTERRUPTED,
                    "mpitune: error: interrupted twice: stopping now; every result that came back is "
                    f"recorded, run the same command again to resume (exit code {ExitCode.INTERRUPTED.value})",
                )

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous_fd)
        self._write.close()
        self._read.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=1.0)
        self._read.close()
