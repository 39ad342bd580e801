"""Whether the results path still names the file rank 0 writes, and what is kept when it does not.

Rank 0 holds the file open for the whole run. Meanwhile another process may remove its name
(``rm``). It may give the name to another file (``mv other.h5 run.h5``) or truncate it (``: > run.h5``).
HDF5 notices none of it. It writes on into a file no name leads to, or into the holes of a
truncated one. The run would end saying its results are where they are not.

So after each flush the writer notes the file's size (``Custody``). Before its next write it asks
three things. Does the path still name the file it holds (device and inode)? Does the file still
have a name (its link count)? Does it still have the size the writer left it at? If not, what the
writer wrote goes to a new file beside the path, never over anything. The writer goes on in that
file (store/cache.py), so that a run can finish the batches it has handed out.

The copy cannot come from the file: a truncated file's bytes are gone. So every write goes
through ``Kept``. It goes to memory at once, and to the file when the writer writes out what
memory holds (store/cache.py says when). What the writer reads back while it writes comes from
memory too: the configurations in flight, the run's row. Once the file is lost (``Kept.detach``)
nothing more goes to it. So what was recorded since the last write-out is kept with the rest.
The cost is the file's rows once more in rank 0's memory, uncompressed. Most of a row's bytes
are its error field. docs/reliability.md gives the size per configuration.

A truncation within the few milliseconds of a flush itself can go unseen. The flush writes the
file back to its full size.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from mpitune.errors import UserError
from mpitune.store.files import cannot_write, claim_temporary, create_hdf5, discard
from mpitune.store.layout import append_rows
from mpitune.store.lock import WriterLock, lock_file

log = logging.getLogger(__name__)


class CustodyLost(Exception):
    """The results path no longer names the file this run writes.

    The message is the one line that says what happened and where the rows went. Or it says why
    they could not be kept."""


@dataclass(frozen=True)
class _Layout:
    """How a dataset is laid out, to lay out its copy alike."""

    maxshape: tuple[int | None, ...]
    chunks: tuple[int, ...] | None
    compression: str | None
    compression_opts: Any
    fletcher32: bool
    fillvalue: Any  # None for compound rows (HDF5's zeros)
    attrs: dict[str, Any]

    @staticmethod
    def of(ds: h5py.Dataset) -> _Layout:
        fill = ds.fillvalue if ds.dtype.names is None else None
        return _Layout(ds.maxshape, ds.chunks, ds.compression, ds.compression_opts, ds.fletcher32, fill, dict(ds.attrs))


class Kept:
    """The datasets of an open file, by name.

    The file is in SWMR mode: no dataset is added from here on. The datasets are written through
    ``append``, ``replace`` and ``put``, and read back with ``rows``. Each of those changes memory
    at once and the file at the next ``write_out``. The rows appended to a dataset since then go in
    one resize and one write. A dataset replaced several times meanwhile is written once."""

    def __init__(self, f: h5py.File):
        self._attrs = dict(f.attrs)
        self._datasets = {name: ds for name, ds in f.items() if isinstance(ds, h5py.Dataset)}
        self._layouts = {name: _Layout.of(ds) for name, ds in self._datasets.items()}
        self._rows: dict[str, list[np.ndarray]] = {name: [ds[...]] for name, ds in self._datasets.items()}
        # Not yet in the file, by dataset in the order first changed: the rows appended, or
        # None where the dataset is to be written whole (replaced); and rows written again.
        self._unwritten: dict[str, list[np.ndarray] | None] = {}
        self._put: dict[str, set[int]] = {}
        self.detached = False

    def detach(self) -> None:
        """Write to memory only from now on: the file is no longer this writer's."""
        self.detached = True

    @property
    def unwritten(self) -> bool:
        """Whether memory holds a change the file does not."""
        return bool(self._unwritten or self._put)

    def append(self, name: str, rows: np.ndarray) -> None:
        if len(rows):
            self._rows[name].append(rows)
            appended = self._unwritten.setdefault(name, [])
            if appended is not None:
                appended.append(rows)

    def replace(self, name: str, rows: np.ndarray) -> None:
        """The dataset ``name`` holds ``rows`` and nothing else."""
        self._rows[name] = [rows]
        self._unwritten[name] = None
        self._put.pop(name, None)

    def put(self, name: str, index: int, row: np.void) -> None:
        """Write row ``index`` of ``name`` again."""
        self.rows(name)[index] = row
        if self._unwritten.get(name, []) is not None:
            self._put.setdefault(name, set()).add(index)

    def write_out(self) -> None:
        """Every change since the last ``write_out`` into the file (none once detached); the
        caller flushes it."""
        while self._unwritten:  # each taken off first: a write that fails is not made twice
            name = next(iter(self._unwritten))
            appended = self._unwritten.pop(name)
            if self.detached:
                continue
            ds = self._datasets[name]
            if appended is None:
                rows = self.rows(name)
                ds.resize(rows.shape)
                if len(rows):
                    ds[...] = rows
            else:
                append_rows(ds, appended[0] if len(appended) == 1 else np.concatenate(appended))
        while self._put:
            name, indices = self._put.popitem()
            if not self.detached:
                rows = self.rows(name)
                for index in sorted(indices):
                    self._datasets[name][index] = rows[index]

    def rows(self, name: str) -> np.ndarray:
        """What ``name`` holds, as written (a view: a caller changes it through ``put`` only)."""
        parts = self._rows[name]
        if len(parts) > 1:
            parts[:] = [np.concatenate(parts)]
        return parts[0]

    def count(self, name: str) -> int:
        return sum(len(p) for p in self._rows[name])

    def write(self, f: h5py.File) -> None:
        """Lay everything out in the new file ``f``.

        It is laid out as it was in the file it was kept from."""
        f.attrs.update(self._attrs)
        for name, layout in self._layouts.items():
            rows = self.rows(name)
            ds = f.create_dataset(
                name,
                shape=rows.shape,
                dtype=rows.dtype,
                maxshape=layout.maxshape,
                chunks=layout.chunks,
                compression=layout.compression,
                compression_opts=layout.compression_opts,
                fletcher32=layout.fletcher32,
                fillvalue=layout.fillvalue,
            )
            if len(rows):
                ds[...] = rows
            ds.attrs.update(layout.attrs)


class Custody:
    """The writer's watch on ``path``, through its lock's descriptor of the file."""

    def __init__(self, path: str, lock: WriterLock):
        self.path = path
        self._lock = lock
        self.size_bytes = lock.stat().st_size

    def stamp(self) -> None:
        """Note the size the writer left the file at (after a flush)."""
        self.size_bytes = self._lock.stat().st_size

    def lost(self) -> str | None:
        """What became of the path since the last ``stamp``, in words.

        None: it names the file still."""
        held = self._lock.stat()
        try:
            named: os.stat_result | None = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            named = None
        except OSError:  # a folder that cannot be searched now: nothing tells the file is lost
            return None
        if named is None:
            return "was removed" if held.st_nlink == 0 else "was moved away"
        if (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino):
            return "was replaced by another file"
        if held.st_size < self.size_bytes:
            return f"was truncated (from {self.size_bytes} to {held.st_size} bytes)"
        if held.st_size != self.size_bytes:
            return f"was written by another process ({self.size_bytes} bytes became {held.st_size})"
        return None

    def rescue(self, what: str, kept: Kept) -> tuple[Loss, WriterLock]:
        """Write what ``kept`` holds to a new file beside the path.

        The file is locked for this writer to go on with. CustodyLost if it cannot be written."""
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            rescued, lock = _write_new(self.path, kept, self._lock.stat().st_mode & 0o777)
        except (OSError, RuntimeError, UserError) as exc:  # HDF5 reports some of the system's refusals so
            plain = f"{folder}: {exc.strerror}" if isinstance(exc, OSError) and exc.strerror else str(exc)
            reason = cannot_write(exc) or plain
            raise CustodyLost(
                f"{self.path} {what} while this run was writing it, and its rows could not be kept beside it: {reason}"
            ) from None
        log.info("%s %s: what was written goes on in %s", self.path, what, rescued)
        return Loss(self.path, what, rescued), lock


@dataclass(frozen=True)
class Loss:
    """The results path ``path`` was lost (``what`` became of it); the rows are in ``kept_in``."""

    path: str
    what: str
    kept_in: str

    def error(self, results: int) -> CustodyLost:
        """The one line for the run's end, once it has recorded ``results`` rows in all."""
        return CustodyLost(
            f"{self.path} {self.what} while this run was writing it; everything it recorded ({results} results) "
            f"is kept in {self.kept_in}: rename that to {os.path.basename(self.path)} (or pass --cache "
            f"{self.kept_in}) and run the same command again to resume"
        )


def let_go(f: h5py.File) -> None:
    """Close ``f`` without writing another byte to the file.

    HDF5's descriptor is pointed at an anonymous memory file first. So what closing flushes goes
    there, not into a file that is another's now. A truncated file may hold someone else's bytes by
    then."""
    try:
        handle = f.id.get_vfd_handle()
        spare = os.memfd_create("mpitune-let-go")
        os.dup2(spare, handle)
        os.close(spare)
        f.close()
    except Exception as exc:  # what the file held is kept already; only its closing failed
        log.debug("closing a lost results file: %s", exc)


def _write_new(path: str, kept: Kept, mode: int) -> tuple[str, WriterLock]:
    """Write the kept rows into a file beside ``path`` named ``PATH.rescued-PID``.

    If that is taken, ``-2``, ``-3`` ... go after it. The file gets the lost file's permissions
    ``mode`` and is locked. It is made under a name of its own and linked into place, as a new cache
    is. So nothing is ever overwritten."""
    partial, new = claim_temporary(path, lambda temporary: create_hdf5(temporary, path))
    try:
        with new as f:
            kept.write(f)
        lock = lock_file(partial, f"{partial}: locked by another process")
        os.chmod(partial, mode)
        base = f"{path}.rescued-{os.getpid()}"
        for attempt in range(1, 1000):
            name = base if attempt == 1 else f"{base}-{attempt}"
            try:
                os.link(partial, name)
                return name, lock
            except FileExistsError:
                continue
        lock.close()
        raise FileExistsError(f"{base}: every name up to -999 is taken")
    finally:
        discard(partial)
