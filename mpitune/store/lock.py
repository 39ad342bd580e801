"""Who writes a cache file now: an exclusive lock on ``PATH.lock`` for as long as a writer lives.

HDF5 drops its own file lock in SWMR mode, and its open-for-write mark outlives a killed
writer, so only this lock tells a live writer from a dead one: the kernel releases it when the
writer's process ends, however it ends. A writer that closes cleanly also removes the lock file,
so that a finished run leaves only its results; one that was killed leaves it, unlocked.
"""

from __future__ import annotations

import fcntl
import os

from mpitune.errors import UserError


def _lock_path(path: str) -> str:
    return path + ".lock"


class WriterLock:
    """The writer lock of one cache file, held from creation until ``release``."""

    def __init__(self, path: str):
        self.path = _lock_path(path)
        while True:
            self._file = open(self.path, "a")  # noqa: SIM115 - held for the writer's lifetime, closed by release
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self._file.close()
                raise UserError(f"another mpitune run is writing {path}; wait for it or use another --out") from None
            if self._is_the_lock_file():
                return
            # A writer removed the file between our open and our lock: this one is gone, lock anew.
            self._file.close()

    def _is_the_lock_file(self) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(self._file.fileno()).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Remove the lock file, then unlock: removing it first means no process can lock the file
        we are about to leave while another creates a new one (every locker checks it locked the
        file that has the name)."""
        if self._file.closed:
            return
        if self._is_the_lock_file():
            os.unlink(self.path)
        self._file.close()


def hold_writer_lock(path: str) -> WriterLock:
    """Take the writer lock of PATH, or refuse a second writer; ``release()`` it when done."""
    return WriterLock(path)


def writer_alive(path: str) -> bool:
    """Whether a run is writing PATH now (it holds the writer lock)."""
    try:
        lock = open(_lock_path(path))  # noqa: SIM115 - closed below; read-only, so never creates the file
    except FileNotFoundError:
        return False
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except OSError:
            return True
