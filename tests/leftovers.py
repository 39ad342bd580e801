"""What the suite leaves running, found and named.

Every process a test starts inherits ``MPITUNE_TEST_SESSION`` (this session's id) in its
environment, and keeps it when it detaches: a daemon that forks into a session of its own, a
slurmd in a network namespace, a job's ranks, a browser. conftest marks the session when it is
loaded and, at the session's end, names and kills every marked process still alive and fails
the session. A process the suite did not start (a site's own munged or slurmd) never carries
the id, so it is never named, nor killed.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MARKER = "MPITUNE_TEST_SESSION"


@dataclass(frozen=True)
class Leftover:
    """A live process of the session; ``start_ticks`` tells it from a later one with its pid."""

    pid: int
    start_ticks: int
    command: str


def mark_session() -> str:
    """A new id for this session, added to the environment everything it starts inherits.
    An outer session's ids stay (tests run pytest inside the suite), so that the outer check
    also sees what an inner session leaves."""
    token = uuid.uuid4().hex
    os.environ[MARKER] = " ".join([*os.environ.get(MARKER, "").split(), token])
    return token


def _stat(pid: int) -> tuple[str, int, int]:
    """(state, parent pid, start time in clock ticks) from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[19])


def _carries(environ: bytes, token: str) -> bool:
    prefix = f"{MARKER}=".encode()
    for variable in environ.split(b"\0"):
        if variable.startswith(prefix):
            return token.encode() in variable[len(prefix) :].split()
    return False


def _ancestors() -> set[int]:
    """This process and those above it: they carry an outer session's id, and are not left over."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            pid = _stat(pid)[1]
        except OSError:
            break
    return found


HELPER_MARKS = ("from multiprocessing.", "--singleton-died-pipe")
"""A multiprocessing resource tracker or fork server; the orted of an Open MPI singleton (a
process that imported mpi4py without mpirun)."""


def _own_helper(parent: int, command: str, ancestors: set[int]) -> bool:
    """A helper of this process or one above it (``HELPER_MARKS``): it ends when its parent
    closes their pipe, after the check, so it is not left over. Killing a singleton's orted
    would abort the tests' own process before it prints its summary."""
    return parent in ancestors and any(mark in command for mark in HELPER_MARKS)


def marked(token: str) -> list[Leftover]:
    """The live processes (not zombies: they have ended) started in session ``token``."""
    skip = _ancestors()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        pid = int(entry.name)
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            state, parent, ticks = _stat(pid)
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile, or not ours to read
        if state != "Z" and _carries(environ, token) and not _own_helper(parent, command, skip):
            found.append(Leftover(pid, ticks, " ".join(command.split())))  # one line, whatever its arguments
    return sorted(found, key=lambda p: p.pid)


def leftovers(token: str, grace_s: float = 15.0) -> list[Leftover]:
    """The session's processes still alive after ``grace_s``: one its killer is waiting for
    (a rank finishing its exit, a daemon saving its state) gets that long to end."""
    deadline = time.monotonic() + grace_s
    while (found := marked(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def kill(processes: list[Leftover]) -> None:
    """SIGKILL each, unless its pid is another process by now."""
    for process in processes:
        try:
            if _stat(process.pid)[2] == process.start_ticks:
                os.kill(process.pid, signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue  # already gone


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and pytest-timeout's SIGALRM while a fixture stops what it started,
    so that a second Ctrl-C or a timeout does not leave half a cluster running; they are
    delivered once it is done. Children start with the default handling (exec resets it)."""
    held: list[int] = []
    kept = {s: signal.signal(s, lambda n, _: held.append(n)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    try:
        yield
    finally:
        for number, handler in kept.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        for number in dict.fromkeys(held):
            os.kill(os.getpid(), number)
