"""Who writes a cache file now: an exclusive lock on ``PATH.lock`` for as long as a writer lives.

HDF5 drops its own file lock in SWMR mode, and its open-for-write mark outlives a killed
writer, so only this lock tells a live writer from a dead one: the kernel releases it when the
writer's process ends, however it ends.
"""

from __future__ import annotations

import fcntl
import os
from typing import IO

from mpitune.errors import UserError


def _lock_path(path: str) -> str:
    return path + ".lock"


def hold_writer_lock(path: str) -> IO[str]:
    """Take the writer lock of PATH, or refuse a second writer; close the returned file to release it."""
    lock = open(_lock_path(path), "a")  # noqa: SIM115 - held for the writer's lifetime, closed by Cache.close
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise UserError(f"another mpitune run is writing {path}; wait for it or use another --cache") from None
    return lock


def writer_alive(path: str) -> bool:
    """Whether a run is writing PATH now (it holds the writer lock)."""
    if not os.path.exists(_lock_path(path)):
        return False
    try:
        with open(_lock_path(path), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
    except OSError:
        return True
