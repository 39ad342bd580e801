"""``check --salvage``: what is readable of a damaged cache file, in a new file in its place.

The damaged file is kept beside it (``PATH.damaged``), unchanged. This explicit change is the one
change mpitune makes to a damaged file, and it can be undone. Rows are copied a chunk at a time.
So a flipped byte costs the rows of its chunk, and their metrics. A file whose attributes or index
cannot be read has nothing to salvage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import h5py
import numpy as np

from mpitune.errors import UserError
from mpitune.store.files import claim_temporary, create_hdf5, discard
from mpitune.store.integrity import repair
from mpitune.store.layout import layout_version, shown_version
from mpitune.store.lock import hold_writer_lock
from mpitune.store.soundness import image

_BESIDE = ("metrics", "observed")  # one row per results row; every other dataset is a table of its own


@dataclass(frozen=True)
class Salvaged:
    rows: int  # results rows kept
    lost: int  # rows of any dataset that could not be read
    backup: str


def _readable(ds: h5py.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """The rows that read back, and their indices."""
    step = ds.chunks[0] if ds.chunks else max(1, len(ds))
    parts, kept = [], []
    for start in range(0, len(ds), step):
        try:
            parts.append(ds[start : start + step])
        except Exception:
            continue
        kept.append(np.arange(start, start + len(parts[-1])))
    if not parts:
        return np.zeros((0, *ds.shape[1:]), ds.dtype), np.zeros(0, np.int64)
    return np.concatenate(parts), np.concatenate(kept)


def _copy(src: h5py.Dataset, dst: h5py.File, rows: np.ndarray) -> None:
    dst.create_dataset(
        src.name,
        data=rows,
        maxshape=(None, *src.shape[1:]),
        chunks=src.chunks or True,
        compression="gzip",
        fletcher32=True,
    )
    for key in src.attrs:
        dst[src.name].attrs[key] = src.attrs[key]


def _every_run(runs: np.ndarray, results: np.ndarray) -> np.ndarray:
    """One row per run, row ``i`` for run ``i``.

    A run whose row was lost gets a row marked killed, so that the results it measured are kept."""
    count = max([len(runs), *(int(r) + 1 for r in results["run"]), *(int(r) + 1 for r in runs["run"])])
    out = np.zeros(count, runs.dtype)
    out["run"], out["status"], out["wall_s"] = np.arange(count), b"killed", np.nan
    for row in runs:
        out[int(row["run"])] = row
    return out


def salvage(path: str) -> Salvaged:
    lock = hold_writer_lock(path)
    try:
        try:
            src = image(path)
            attrs = {key: src.attrs[key] for key in src.attrs}
        except Exception as exc:
            raise UserError(f"{path}: nothing can be salvaged ({exc})") from None
        tables = _tables(src, path)
        partial, dst = claim_temporary(path, lambda temporary: create_hdf5(temporary, path))
        try:
            with src, dst:
                dst.attrs.update(attrs)
                kept, lost = _copy_readable(tables, dst)
                if layout_version(dst).damage:  # lost: the version its tables show, else it stays damaged
                    dst.attrs["schema_version"] = shown_version(dst)
                repair(dst)
        except BaseException:
            discard(partial)
            raise
        backup = f"{path}.damaged"
        os.replace(path, backup)
        os.replace(partial, path)
        return Salvaged(kept, lost, backup)
    finally:
        lock.close()


def _tables(src: h5py.File, path: str) -> dict[str, h5py.Dataset]:
    """The file's tables, as its root group lists them, each opened.

    That list, or a table's own header (its columns), may no longer read. Then the file cannot say
    what a salvaged copy should hold. Nothing is salvaged: the file stays as it is."""
    try:
        return {name: src[name] for name in src}
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        src.close()
        raise UserError(f"{path}: nothing can be salvaged (its tables do not open: {exc})") from None


def _copy_readable(src: dict[str, h5py.Dataset], dst: h5py.File) -> tuple[int, int]:
    """Copy what reads back of every table; the results rows kept and the rows lost.

    It copies every table the file holds, not a list of them. So a table added to the layout is kept
    without salvage having to know of it: the priors, the devices compared, the front."""
    lost, kept = 0, 0
    result_rows, read = None, {}
    for name in (n for n in src if n not in _BESIDE):
        read[name], at = _readable(src[name])
        lost += len(src[name]) - len(read[name])
        if name == "results":
            result_rows, kept = at, len(read[name])
    if "runs" in read and "results" in read:
        read["runs"] = _every_run(read["runs"], read["results"])
    for name, rows in read.items():
        _copy(src[name], dst, rows)
    for name in _BESIDE:
        if name in src and result_rows is not None:
            values, at = _readable(src[name])
            out = np.full((len(result_rows), src[name].shape[1]), np.nan)
            where = np.searchsorted(at, result_rows)
            found = (
                (where < len(at)) & (at[np.minimum(where, len(at) - 1)] == result_rows)
                if len(at)
                else np.zeros(len(result_rows), bool)
            )
            out[found] = values[where[found]]
            _copy(src[name], dst, out)
    return kept, lost
