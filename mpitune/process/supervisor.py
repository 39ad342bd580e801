"""Child processes a rank supervises: spawned, waited for with a deadline, killed, restarted.

A rank hands work that may hang or crash (a kernel, a compiler) to child processes. Then the
failure costs the child, not the rank. What every such child needs is the same:

- It is started with "spawn". Fork is unsafe once MPI and CUDA are initialised.
- It ignores the signals Slurm sends before a job ends (SIGINT, SIGTERM, SIGUSR1). Stopping is
  the rank's decision. A child that died of them would turn its work into a failure the kernel
  did not cause.
- It ends by itself when its rank is gone (SIGKILLed, say), even while busy or stuck in a
  kernel. It must not hold a GPU or cores until the job's time limit.
- The rank waits for its reply with a deadline. It tells a hang (nothing within the deadline)
  from a death. For a death, the exit code or signal says how the child went.
- It starts even when the rank's working folder was deleted during the run (a scratch folder
  cleaned up). A restart must not end the rank that holds the run's results.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import connection
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from typing import Any

from mpitune.exits import ExitCode

log = logging.getLogger(__name__)
SPAWN = multiprocessing.get_context("spawn")
SPAWN_FOLDER = "/"  # where children start when the rank's working folder is gone
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
POLL_S = 0.5  # how often a waiting rank checks that its children are alive, and a child its rank
JOIN_S = 10.0  # how long a killed or stopped child may take to be reaped
EXIT_CODE_S = 5.0  # how long a child whose channel closed may take to report how it ended


class Lost(Exception):
    """The child did not answer: it hung or it died."""


class Hang(Lost):
    """No reply within the deadline; the child may still be running."""

    def __init__(self, deadline_s: float):
        super().__init__(f"no reply within {deadline_s:.1f} s")
        self.deadline_s = deadline_s


class Death(Lost):
    """The child ended without replying; the message says how ("killed by SIGSEGV", "exit code 1")."""


@dataclass
class Patience:
    """A deadline on silence: how long, in all, a rank may wait without hearing from its children.

    Several waits share it when one answer is awaited among others. A pool whose other results
    keep coming in is not hung."""

    limit_s: float | None
    waited_s: float = 0.0

    def slice_s(self) -> float:
        if self.limit_s is None:
            return POLL_S
        return max(0.0, min(POLL_S, self.limit_s - self.waited_s))


def exit_description(exitcode: int | None) -> str:
    """How a child ended, as a user reads it in a result's error."""
    if exitcode is not None and exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def _exit_when_orphaned(parent_pid: int) -> None:
    """End at once when the parent is gone, whatever the main thread is doing.

    The child is then adopted by another process. A kernel that never returns is no obstacle."""
    while os.getppid() == parent_pid:
        time.sleep(POLL_S)
    os._exit(ExitCode.OK)


def _bootstrap(parent_pid: int, target: Callable[..., None], args: tuple) -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="mpitune-orphan-watch", daemon=True).start()
    target(*args)


@contextmanager
def _existing_folder() -> Iterator[None]:
    """Spawn from ``SPAWN_FOLDER`` where the rank's working folder is gone.

    A spawn hands the child the parent's working folder (``os.getcwd()``). That raises once the
    folder was deleted. Then the rank steps into ``SPAWN_FOLDER`` for the spawn and back after.
    So nothing else about the rank changes. A relative path still fails rather than name another
    file."""
    try:
        os.getcwd()
    except FileNotFoundError:
        pass
    else:
        yield
        return
    log.warning("the working folder was deleted during the run: starting child processes in %s", SPAWN_FOLDER)
    here = os.open(".", os.O_RDONLY)
    try:
        os.chdir(SPAWN_FOLDER)
        yield
    finally:
        os.fchdir(here)
        os.close(here)


def _spawn_below(processes: list[BaseProcess], nice: int) -> None:
    """Start ``processes`` from a thread that first lowers its own priority by ``nice``.

    On Linux a thread's nice value is its own. A child inherits its parent thread's. So the
    children run at the lower priority from their first instruction. A Python's start and
    imports are the CPU they spend first. The calling thread keeps its own priority."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
        except OSError:  # not allowed here: they run at the same priority
            pass
        try:
            for process in processes:
                process.start()
        except BaseException as exc:  # raised below, in the calling thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="mpitune-spawn-below")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


class Supervisor:
    """A group of children run from one target with the same arguments, one per name.

    The arguments are the channels they share with the rank. The children are started, waited
    for and killed together. After a hang or a death the owner starts them again, on fresh
    channels."""

    def __init__(self, target: Callable[..., None], names: Sequence[str], nice: int = 0):
        """``nice``: how much lower than the spawning thread's the children's priority is."""
        self.target, self.names, self.nice = target, list(names), nice
        self.processes: list[BaseProcess] = []

    def start(self, *args: Any) -> None:
        """Spawn the children; each calls ``target(*args)`` in a process of its own."""
        self.processes = [
            SPAWN.Process(target=_bootstrap, args=(os.getpid(), self.target, args), name=name, daemon=True)
            for name in self.names
        ]
        with _existing_folder():
            if self.nice:
                _spawn_below(self.processes, self.nice)
            else:
                for process in self.processes:
                    process.start()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def alive(self) -> bool:
        """Whether every child is still running."""
        return all(p.is_alive() for p in self.processes)

    def death(self) -> str:
        """How the first child that ended did so (waiting briefly for its exit code)."""
        ended = connection.wait([p.sentinel for p in self.processes], EXIT_CODE_S)
        for process in self.processes:
            if process.sentinel in ended:
                process.join(EXIT_CODE_S)  # its sentinel closes a moment before its exit code is there
                return exit_description(process.exitcode)
        return exit_description(None)

    def receive(self, source: Connection | Queue, patience: Patience) -> Any:
        """The next message from the children on ``source``, within ``patience``.

        Raises ``Hang`` when patience runs out, ``Death`` when a child is gone first."""
        get = _reader(source)
        while True:
            wait_s = patience.slice_s()
            try:
                return get(wait_s)
            except queue.Empty:
                pass
            except EOFError:  # the only writer closed its end: it ended
                raise Death(self.death()) from None
            patience.waited_s += wait_s
            if patience.limit_s is not None and patience.waited_s >= patience.limit_s:
                raise Hang(patience.limit_s)
            if not self.alive():
                raise Death(self.death())

    def join(self, timeout_s: float = JOIN_S) -> None:
        """Give children that were told to stop the time to do so."""
        for process in self.processes:
            process.join(timeout_s)

    def kill(self) -> None:
        """SIGKILL whatever is still running and reap it."""
        for process in self.processes:
            if process.is_alive():
                process.kill()
        self.join()


def _reader(source: Connection | Queue) -> Callable[[float], Any]:
    """A read with a timeout that raises ``queue.Empty`` when nothing came, for either channel."""
    if isinstance(source, Queue):
        return lambda timeout_s: source.get(timeout=timeout_s)

    def read(timeout_s: float) -> Any:
        if not source.poll(timeout_s):
            raise queue.Empty
        return source.recv()

    return read
