"""Who writes a cache file now: an open-file-description lock on the file itself, held for as long
as a writer lives.

HDF5 drops its own file lock in SWMR mode, and its open-for-write mark outlives a killed
writer, so only this lock tells a live writer from a dead one: the kernel releases it when the
writer's process ends, however it ends. It is taken on the file's inode, not on a name, so a
second writer through a symbolic or hard link is refused too, and no lock file is left beside
the cache. An OFD lock (``F_OFD_SETLK``) rather than ``flock``: HDF5 takes ``flock`` locks of its
own on the same file (Linux keeps the two kinds apart), and unlike classic POSIX locks it is not
dropped when the same process closes another descriptor of the file (a reader, a check).
"""

from __future__ import annotations

import fcntl
import os
import struct

from mpitune.errors import UserError

# struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padding.
_FLOCK = "hhqqi4x"


def _whole_file(kind: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 0, 0)


class WriterLock:
    """The writer's lock on one file: held until ``close``."""

    def __init__(self, fd: int):
        self._fd = fd

    def names(self, path: str) -> bool:
        """Whether PATH still names the locked file (a rename may have replaced it meanwhile)."""
        try:
            named, held = os.stat(path), os.fstat(self._fd)
        except FileNotFoundError:
            return False
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def stat(self) -> os.stat_result:
        """The locked file as it is now, whatever its names (custody.py)."""
        return os.fstat(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def lock_file(path: str, refused: str) -> WriterLock:
    """Lock the file PATH names now, or raise UserError(refused) if another writer holds it."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _whole_file(fcntl.F_WRLCK))
    except OSError:
        os.close(fd)
        raise UserError(refused) from None
    return WriterLock(fd)


def hold_writer_lock(path: str) -> WriterLock:
    """Take the writer lock of the existing file PATH, or refuse a second writer, under any of its names."""
    refused = f"another mpitune run is writing {path} (under this or another name); wait for it or use another --out"
    while True:
        lock = lock_file(path, refused)
        if lock.names(path):
            return lock
        lock.close()  # the name was given to another file meanwhile: lock that one


def writer_alive(path: str) -> bool:
    """Whether a run is writing the file PATH names now (it holds the writer lock); takes nothing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _whole_file(fcntl.F_WRLCK))
    finally:
        os.close(fd)
    held: bool = struct.unpack(_FLOCK, answer)[0] != fcntl.F_UNLCK
    return held
