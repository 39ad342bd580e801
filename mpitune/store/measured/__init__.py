"""Measured results from earlier tuning, read from either kind of file into one table.

Kernel Tuner's JSON caches are read by kernel_tuner.py, mpitune's HDF5 files by mpitune_file.py,
both into table.py's ``MeasuredData``. A replay answers from it, an import writes it to a file,
and a prior starts a search from it (model/prior.py).
"""

from __future__ import annotations

import hashlib
import os

from mpitune.errors import UserError, not_a_file
from mpitune.store.measured.kernel_tuner import from_kt_document, read_kt_json
from mpitune.store.measured.table import MeasuredData, Measurement, Searched

__all__ = [
    "MeasuredData",
    "Measurement",
    "Searched",
    "file_sha256",
    "from_kt_document",
    "load",
    "load_shared",
    "read_kt_json",
]


def file_sha256(path: str) -> str:
    """The digest of a file's bytes, by which a resumed run knows its prior unchanged."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return digest.hexdigest()


def load(path: str) -> MeasuredData:
    """Read the measured data of a file, each kind by its name's ending.

    Args:
        path: an mpitune file (``.h5``, ``.hdf5``) or a Kernel Tuner cache (JSON, maybe gzipped).

    Returns:
        Its configurations, each with its measurement.
    """
    if not os.path.isfile(path):
        raise UserError(f"{path}: {not_a_file(path) or 'no such file'}")
    if path.endswith((".h5", ".hdf5")):
        from mpitune.store.measured.mpitune_file import read_mpitune_file  # h5py, only for such a file

        return read_mpitune_file(path)
    return from_kt_document(path, read_kt_json(path))


_SHARED: dict[tuple[str, int, int, int], MeasuredData] = {}  # the file last loaded, by its name and stat


def load_shared(path: str) -> MeasuredData:
    """``load(path)`` once per process while the file is unchanged, one object no caller may change.

    A replay's rank 0 reads it twice, and ``plan`` once per simulated rank (256: minutes).
    """
    if not os.path.isfile(path):
        return load(path)  # which says why
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _SHARED:
        _SHARED.clear()
        _SHARED[key] = load(path)
    return _SHARED[key]
