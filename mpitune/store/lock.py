"""Who writes a cache file now, and how the store opens HDF5 files where there are no locks.

The writer is told by an open-file-description lock on the file itself. It is held for as long
as a writer lives.

HDF5 drops its own file lock in SWMR mode. Its open-for-write mark outlives a killed writer.
So only this lock tells a live writer from a dead one. The kernel releases it when the writer's
process ends, however it ends. It is taken on the file's inode, not on a name. So a second writer
through a symbolic or hard link is refused too, and no lock file is left beside the cache.

It is an OFD lock (``F_OFD_SETLK``) rather than ``flock``. HDF5 takes ``flock`` locks of its own
on the same file, and Linux keeps the two kinds apart. A classic POSIX lock is dropped when the
same process closes another descriptor of the file (a reader, a check). An OFD lock is not.

Some file systems have no locks at all: Lustre mounted without ``flock``, NFS without its lock
daemon. Every lock call fails there with ENOLCK, ENOSYS or EOPNOTSUPP, HDF5's and this module's
alike. That is not "another run is writing" (EAGAIN). It is said as what it is, with what to do.
The fix is ``HDF5_USE_FILE_LOCKING=FALSE``, the setting HPC users know, which HDF5 reads too. Or
it is ``MPITUNE_FILE_LOCKING=off``. Under either, nothing is locked, by HDF5 or by mpitune. A
second writer then goes unseen, which is said once per process.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import h5py

from mpitune.errors import UserError
from mpitune.store.files import as_known

log = logging.getLogger(__name__)

LOCKING_VARIABLE = "MPITUNE_FILE_LOCKING"  # on or off; unset: as HDF5_USE_FILE_LOCKING says
HDF5_LOCKING_VARIABLE = "HDF5_USE_FILE_LOCKING"
_OFF = ("off", "0", "false", "no")
_ON = ("on", "1", "true", "yes")
# A lock another process holds (fcntl answers EAGAIN or EACCES), and a file system without locks.
HELD = (errno.EAGAIN, errno.EACCES)
UNSUPPORTED = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)

# struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padding.
_FLOCK = "hhqqi4x"


@dataclass(frozen=True)
class Locking:
    """Whether the store locks its files, and the setting that says so ("" for the default: on)."""

    on: bool
    said_by: str = ""


def locking(environ: Mapping[str, str] | None = None) -> Locking:
    """The locking setting.

    ``MPITUNE_FILE_LOCKING`` (on/off) counts if set to either. Else ``HDF5_USE_FILE_LOCKING`` counts:
    FALSE or 0 is off, as for HDF5, in any case. Else locking is on. A value that is neither is not
    a setting."""
    env = os.environ if environ is None else environ
    for variable, off, on in ((LOCKING_VARIABLE, _OFF, _ON), (HDF5_LOCKING_VARIABLE, ("false", "0"), ())):
        value = env.get(variable, "").strip()
        if value.lower() in off + on:
            return Locking(value.lower() in on, f"{variable}={value}")
    return Locking(True)


class LocksUnsupportedError(UserError):
    """The file system refuses every lock: one line that says so and what to do."""

    def __init__(self, path: str, code: int):
        super().__init__(
            f"{path}: this file system does not support file locks ({errno.errorcode.get(code, code)}: "
            f"{os.strerror(code)}); set {HDF5_LOCKING_VARIABLE}=FALSE (or {LOCKING_VARIABLE}=off) to work "
            f"without them, one run at a time per file"
        )


@functools.cache
def _warn_unlocked(said_by: str) -> None:
    """Once per process: what running without locks gives up."""
    log.warning(
        "file locking is off (%s): a second run writing the same file at the same time is not detected; "
        "run one at a time on each file",
        said_by,
    )


def unlocked() -> bool:
    """Whether the store locks nothing (said once, with what that gives up)."""
    setting = locking()
    if not setting.on:
        _warn_unlocked(setting.said_by)
    return not setting.on


def h5_file(path: str, mode: str, known_as: str | None = None, **kwargs: Any) -> h5py.File:
    """``h5py.File(path, mode, ...)``, without HDF5's own locks where locking is off.

    A file system that refuses the locks raises ``LocksUnsupportedError``, not HDF5's traceback.
    It names ``known_as``, the file as the user knows it, if PATH is a temporary beside it."""
    if unlocked():
        kwargs["locking"] = False
    try:
        return h5py.File(path, mode, **kwargs)
    except OSError as exc:
        if exc.errno in UNSUPPORTED:
            raise LocksUnsupportedError(known_as or path, exc.errno) from None
        raise


def _whole_file(kind: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 0, 0)


class WriterLock:
    """The writer's lock on one file: held until ``close`` (with locking off, only the file open)."""

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


def lock_file(path: str, refused: str, known_as: str | None = None) -> WriterLock:
    """Lock the file PATH names now, or raise UserError(refused) if another writer holds it.

    ``known_as`` is the file as the user knows it, if PATH is a temporary beside it. The system may
    not open the file for writing: a read-only file system, no permission. Then its ``OSError``
    names that file, for the caller's one line (files.py, ``refused_write``)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        raise as_known(exc, known_as or path) from None
    if unlocked():
        return WriterLock(fd)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _whole_file(fcntl.F_WRLCK))
    except OSError as exc:
        os.close(fd)
        if exc.errno in HELD:
            raise UserError(refused) from None
        if exc.errno in UNSUPPORTED:
            raise LocksUnsupportedError(known_as or path, exc.errno) from None
        raise UserError(f"cannot lock {known_as or path}: {exc.strerror}") from None
    return WriterLock(fd)


def hold_writer_lock(path: str) -> WriterLock:
    """Take the writer lock of the existing file PATH, or refuse a second writer.

    The lock holds under any of the file's names."""
    refused = f"another mpitune run is writing {path} (under this or another name); wait for it or use another --out"
    while True:
        lock = lock_file(path, refused)
        if lock.names(path):
            return lock
        lock.close()  # the name was given to another file meanwhile: lock that one


def writer_alive(path: str) -> bool:
    """Whether a run is writing the file PATH names now: it holds the writer lock.

    Takes nothing. With locking off no run can be seen: False."""
    if unlocked():
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _whole_file(fcntl.F_WRLCK))
    except OSError as exc:
        if exc.errno in UNSUPPORTED:
            raise LocksUnsupportedError(path, exc.errno) from None
        raise
    finally:
        os.close(fd)
    held: bool = struct.unpack(_FLOCK, answer)[0] != fcntl.F_UNLCK
    return held
