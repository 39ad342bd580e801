"""Every file mpitune writes, a run's results file and the offline verbs' outputs alike.

Such a file is never one of its inputs and never written through a link someone planted. It is
never half-written, whatever its name's length.

An output may be given as an input's path, or as another path to the same file. That path may
be ``./x``, a symbolic or a hard link. It would replace the data it is made from. So ``refuse_inputs`` refuses
it, comparing device and inode. The file is then made under a temporary name in the output's
folder. Once complete, it is renamed into place (a new results file: linked). So a failure leaves
any earlier file of that name as it was.

The temporary name is short and random: ``.mpitune-``, 16 hex digits, ``.tmp``. The output's
name with a suffix would not do. The system limits a name to NAME_MAX, 255 bytes, and the
output's own name may be that long. The file is created exclusively (O_CREAT | O_EXCL, and O_NOFOLLOW).
Whatever is there already, a file or a symbolic link, is neither opened nor followed. The next
random name is tried instead. So a link planted at the name cannot send the write to its target.

The system may refuse a write all the same: a full disk, a read-only folder. ``refused_write``
tells that from a bug. h5py reports it as an ``OSError`` or a ``RuntimeError`` whose text holds
"errno = 28". Plain Python writes raise an ``OSError`` with ``errno`` set. Either way the data
already recorded is intact: the cache is flushed per batch, and outputs are renamed into place.
So the user needs one line, not a traceback, with ``ExitCode.CANNOT_WRITE``. The line says what
the system said and what to do about it (``REASONS``). That is room for a full disk, another
place for a read-only one. Every error names the file as the user knows it, never a temporary
beside it. A run asks ``refuse_unwritable`` before it starts. A file system mounted read-only is
said as that. A check of the permissions alone would say "permission denied".

And here is the one bounded read of a file a user hands mpitune (``read_within``). A small gzip
can expand a thousandfold. So it is expanded a block at a time, and refused once past a cap,
before it is held.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, TypeVar

from mpitune.errors import UserError

if TYPE_CHECKING:
    import h5py

TEMPORARY_PREFIX = ".mpitune-"
TEMPORARY_SUFFIX = ".tmp"
# Names taken in a row before giving up: with 64 random bits, only a folder that refuses every
# new name (EEXIST for all) gets this far.
_TRIES = 100
_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
Made = TypeVar("Made")


@dataclass(frozen=True)
class Reason:
    """Why the system refused a write, as the user reads it, and what to do before a rerun."""

    cause: str
    remedy: str


_ROOM = "make room and run the same command again to resume"
REASONS = {
    errno.ENOSPC: Reason("the disk is full", _ROOM),
    errno.EDQUOT: Reason("the disk quota is exceeded", _ROOM),
    errno.EROFS: Reason(
        "the file system is read-only",
        "write to a writable file system (--out, with the file copied there to resume) or remount this one read-write",
    ),
    errno.EACCES: Reason(
        "permission denied",
        "write where this user may (--out, with the file copied there to resume) or grant write permission on the "
        "file and its folder",
    ),
}
REASONS[errno.EPERM] = REASONS[errno.EACCES]


@dataclass(frozen=True)
class RefusedWrite:
    """A write the system refused: the file, as the user knows it, and why."""

    path: str
    reason: Reason

    @property
    def line(self) -> str:
        return f"{self.path}: cannot write: {self.reason.cause}"


_H5_ERRNO = re.compile(r"errno = (\d+)")
_H5_FILE = re.compile(r"(?:file)?name = '([^']*)'")


def refuse_inputs(out: str, *inputs: str) -> None:
    """A ``UserError`` when ``out`` is one of ``inputs`` (the same file by any path)."""
    try:
        target = os.stat(out)
    except OSError:
        return  # nothing there yet (or a dangling link): no input to lose
    for given in inputs:
        try:
            source = os.stat(given)
        except OSError:
            continue  # "" (no such input) or gone
        if (source.st_dev, source.st_ino) == (target.st_dev, target.st_ino):
            raise UserError(f"{out} is the input {given}; write the output to another file")


def read_within(path: str, cap_mb: float, setting: str) -> bytes:
    """The bytes of ``path``, gunzipped where its name ends in .gz.

    More than ``cap_mb`` MiB of them are refused in one line. It names the cap and the ``setting``
    that sets it."""
    cap = int(cap_mb * (1 << 20))
    gz = path.endswith(".gz")
    try:
        with (gzip.open if gz else open)(path, "rb") as fh:
            data = fh.read(cap + 1)
    except (OSError, EOFError, zlib.error) as exc:  # EOFError, zlib.error: a cut or damaged gzip
        raise UserError(f"{path}: cannot read: {exc}") from None
    if len(data) > cap:
        raise UserError(
            f"{path}: more than {cap_mb:g} MiB{' once decompressed' if gz else ''} ({setting} sets the most); not read"
        )
    return data


def folder_of(path: str) -> str:
    """The existing folder ``path`` goes into; a ``UserError`` naming it if there is none."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserError(f"{path}: the folder {directory} does not exist")
    return directory


def create_exclusive(path: str) -> int:
    """A new, empty file at ``path``, open for writing.

    It has the permissions ``open`` gives: 0666 less the umask. ``FileExistsError`` if anything is
    there, a symbolic link included."""
    return os.open(path, _EXCLUSIVE, 0o666)


def create_hdf5(path: str, known_as: str | None = None) -> h5py.File:
    """A new HDF5 file at ``path``, made as ``create_exclusive`` makes one.

    HDF5's exclusive create is O_CREAT | O_EXCL, which follows no link either. Where the file system
    has no locks, the error names ``known_as``, the file as the user knows it (store/lock.py)."""
    from mpitune.store.lock import h5_file  # only for the results file: the text outputs need no HDF5

    try:
        return h5_file(path, "x", known_as=known_as, libver="latest")
    except (OSError, RuntimeError) as exc:
        raise as_known(exc, known_as or path) from None


def claim_temporary(destination: str, create: Callable[[str], Made]) -> tuple[str, Made]:
    """A temporary name in ``destination``'s folder and what ``create`` made there.

    ``create`` must create exclusively, raising ``FileExistsError`` where the name is taken. A
    ``create`` may fail after making the file. HDF5 does: it makes the file, then finds that the
    file system refuses its lock. Such a failure leaves nothing behind."""
    directory = folder_of(destination)
    for _ in range(_TRIES):
        temporary = os.path.join(directory, f"{TEMPORARY_PREFIX}{os.urandom(8).hex()}{TEMPORARY_SUFFIX}")
        try:
            return temporary, create(temporary)
        except FileExistsError:
            continue
        except BaseException:
            discard(temporary)
            raise
    raise UserError(f"{destination}: no free temporary name in {directory} after {_TRIES} tries")


def discard(temporary: str) -> None:
    """Remove a temporary file if it is there.

    The name itself is removed: a link there is not followed. On a read-only file system, unlink
    answers EROFS even for a name that is not there. Nothing of this run's can be removed there. The
    error that led here is the one to report."""
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != errno.EROFS:
            raise


@contextmanager
def written_whole(path: str) -> Iterator[IO[bytes]]:
    """A binary file that replaces ``path`` only once complete and on disk.

    The system's refusal (a full disk, a read-only folder) is an ``OSError`` naming ``path``, not
    the temporary."""
    try:
        temporary, fd = claim_temporary(path, create_exclusive)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        discard(temporary)
        raise OSError(exc.errno, exc.strerror, path) from None
    except BaseException:
        discard(temporary)
        raise


def _refused_errno(exc: BaseException) -> int:
    """The errno of a write the system refused; 0 if none.

    It is Python's errno, or the one h5py's text holds."""
    if not isinstance(exc, (OSError, RuntimeError)):
        return 0
    found = _H5_ERRNO.search(str(exc))
    code = exc.errno if isinstance(exc, OSError) and exc.errno else int(found.group(1)) if found else 0
    return code if code in REASONS else 0


def refused_write(exc: BaseException) -> RefusedWrite | None:
    """What an exception says if it is the system refusing a write; None for anything else."""
    code = _refused_errno(exc)
    if not code:
        return None
    named = _H5_FILE.search(str(exc))
    path = getattr(exc, "filename", None) or (named.group(1) if named else "the file")
    return RefusedWrite(path, REASONS[code])


def cannot_write(exc: BaseException) -> str | None:
    """The line for an exception that is the system refusing a write; None for anything else."""
    refused = refused_write(exc)
    return None if refused is None else refused.line


def as_known(exc: BaseException, known_as: str) -> BaseException:
    """A write the system refused, as an ``OSError`` naming ``known_as``; anything else as it is.

    ``known_as`` is the file as the user knows it, not the temporary beside it."""
    code = _refused_errno(exc)
    return OSError(code, os.strerror(code), known_as) if code else exc


def refuse_unwritable(path: str) -> None:
    """Raise the ``OSError`` a write to ``path`` would meet, before a run starts rather than after.

    It checks the existing file, else its folder. EROFS where the file system is mounted read-only:
    the permissions may well allow the write. Else EACCES. Writes nothing."""
    target = path if os.path.lexists(path) else os.path.dirname(os.path.abspath(path))
    if os.access(target, os.W_OK):
        return
    try:
        read_only = bool(os.statvfs(target).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    code = errno.EROFS if read_only else errno.EACCES
    raise OSError(code, os.strerror(code), path)
