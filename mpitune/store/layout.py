"""The datasets of a new cache file, laid out from the results schema (mpitune/model/schema.py).

The compound datasets grow by appending rows. They are chunked and compressed, so that an append
after every batch stays cheap. ``metrics`` and ``observed`` are float64 tables beside ``results``,
one row per results row. Every chunk carries a Fletcher-32 checksum. So a flipped byte in the
data is an error when it is read, instead of a wrong number. HDF5 checksums its own metadata
already. docs/cache-format.md describes what each holds.

The version a file records (``schema_version``) is judged here once, for every verb
(``layout_version``). This version's and earlier ones are read and written. A later one is read
with a warning and never written. A missing or garbled one is damage.
"""

from __future__ import annotations

import enum
import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from mpitune.errors import UserError
from mpitune.model import schema
from mpitune.model.identity import ProblemIdentity

log = logging.getLogger(__name__)
_CHUNK_ROWS = 256
# Every flush compresses the last, partly filled chunk again: chunks of about 64 KiB keep that
# cost small for wide rows (a results row carries a 1 KiB error field), and a row wider than that
# (10^5 launch times are 800 KB) is a chunk of its own: 16 of them made each flush of 10^6
# launches a row compress 128 MB, 3 s on a 2-core AMD EPYC.
_CHUNK_BYTES = 64 << 10
# The tables beside results, one row per phase, run or rank.
_TABLES = {"timeline": schema.TIMELINE_DTYPE, "runs": schema.RUNS_DTYPE, "ranks": schema.RANKS_DTYPE}
# The search's history (see schema.ASKED_COLUMNS and TOLD_COLUMNS), the priors it started from (schema.PRIOR_COLUMNS)
# and its devices compared (schema.RETIMED_COLUMNS); files written before them lack them until a
# run adds them.
HISTORY = {
    "asked": schema.ASKED_DTYPE,
    "told": schema.TOLD_DTYPE,
    "schedules": schema.SCHEDULE_DTYPE,
    "searches": schema.SEARCH_DTYPE,
    "priors": schema.PRIOR_DTYPE,
    "retimed": schema.RETIMED_DTYPE,
    "confirmed": schema.CONFIRMED_DTYPE,
    "device_factors": schema.DEVICE_FACTOR_DTYPE,
}


def _chunk_rows(dtype: np.dtype) -> int:
    return max(1, min(_CHUNK_ROWS, _CHUNK_BYTES // dtype.itemsize))


def lay_out(f: h5py.File, identity: ProblemIdentity, tune_params: dict[str, list[Any]], iterations: int) -> None:
    """Every dataset and attribute of a new file, empty.

    ``metrics`` is left to the writer, which lays it out for each run's objective."""
    f.attrs["schema_version"] = schema.SCHEMA_VERSION
    f.attrs["problem_hash"] = identity.digest()
    f.attrs["problem"] = identity.to_json()
    f.attrs["param_names"] = json.dumps(list(tune_params))
    tables = {"results": schema.results_dtype(tune_params, iterations), **_TABLES}
    for name, dtype in tables.items():
        _table(f, name, dtype, compress=name != "runs")
    _table(f, "in_flight", schema.IN_FLIGHT_DTYPE, compress=False)
    add_history(f)
    values_dataset(f, "observed", list(identity.observed_names), 0)


_NOT_WRITTEN = "it was not changed; use the mpitune that wrote it, or tune into another file (--out NEW.h5)"


class Layout(enum.Enum):
    """What a file's ``schema_version`` says of its layout, to this mpitune."""

    CURRENT = "current"  # this version's: read and written
    OLDER = "older"  # an earlier version's: read, and resumed (a run adds the tables it lacks)
    NEWER = "newer"  # a later mpitune's: read where it can be, with a warning; never written
    LOST = "lost"  # missing or not a version number: the file is damaged


@dataclass(frozen=True)
class LayoutVersion:
    """A file's layout version, classified once here for every verb.

    It is the one rule of which files this mpitune reads and which it writes."""

    layout: Layout
    number: int  # 0 when lost
    damage: str = ""  # why it is lost: a finding, as ``check`` prints it

    def refuse_newer(self, path: str, outcome: str = _NOT_WRITTEN) -> None:
        """A file of a newer layout is never written, nor called sound.

        Its writer holds it to rules this version does not know. And a resume would mix two layouts in
        one file."""
        if self.layout is Layout.NEWER:
            raise UserError(
                f"{path} has layout version {self.number}, newer than this mpitune's {schema.SCHEMA_VERSION}: {outcome}"
            )

    def readable(self, path: str) -> int:
        """The version, for a reader.

        A lost one is refused in one line. A newer one is read with a warning, once per path. Its tables
        may mean what this mpitune cannot know."""
        if self.layout is Layout.LOST:
            raise UserError(f"{path} is damaged: {self.damage} (python -m mpitune check {path} says more)")
        if self.layout is Layout.NEWER and path not in _WARNED:
            _WARNED.add(path)
            log.warning(
                "%s has layout version %d, newer than this mpitune's %d: read as far as this "
                "version understands it; a newer mpitune reads all of it",
                path,
                self.number,
                schema.SCHEMA_VERSION,
            )
        return self.number


# Paths whose newer layout this process has warned of: ``watch`` reads its file again and again.
_WARNED: set[str] = set()


def layout_version(f: h5py.File) -> LayoutVersion:
    """Classify the file's ``schema_version``.

    It is an integer from 1 up; docs/cache-format.md lists each version. Anything else, or none, is
    damage rather than a guess."""
    if "schema_version" not in f.attrs:
        return LayoutVersion(Layout.LOST, 0, "attribute schema_version is missing")
    value = f.attrs["schema_version"]
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= 1:
        number = int(value)
        if number == schema.SCHEMA_VERSION:
            return LayoutVersion(Layout.CURRENT, number)
        return LayoutVersion(Layout.OLDER if number < schema.SCHEMA_VERSION else Layout.NEWER, number)
    shown = repr(value.tolist() if isinstance(value, np.generic | np.ndarray) else value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return LayoutVersion(Layout.LOST, 0, f"attribute schema_version is {shown}, not a layout version")


# What each version added that a file shows (docs/cache-format.md): a results column or a table.
_ADDED = ((2, "launches"), (3, "throttled"), (4, "priors"), (5, "told"), (6, "schedules"))


def shown_version(f: h5py.File) -> int:
    """The version a file's own datasets show: the latest whose additions it holds.

    It serves ``check --salvage`` of a file whose version was lost. The readers go by what a file
    holds, so a version that is a floor reads it whole."""
    names = f["results"].dtype.names or () if "results" in f else ()
    return max([1, *(version for version, added in _ADDED if added in names or added in f)])


def _table(f: h5py.File, name: str, dtype: np.dtype, compress: bool = True) -> None:
    f.create_dataset(
        name,
        shape=(0,),
        maxshape=(None,),
        dtype=dtype,
        chunks=(_chunk_rows(dtype),),
        compression="gzip" if compress else None,
        fletcher32=True,
    )


def add_history(f: h5py.File) -> None:
    """The datasets of the search's history, where a file lacks them (written before they existed)."""
    for name, dtype in HISTORY.items():
        if name not in f:
            _table(f, name, dtype)


def set_front(f: h5py.File, several: bool) -> None:
    """The ``front`` dataset for a run with several objectives, written when it ends.

    A run of one objective gets none: a front left by an earlier run would describe other
    objectives."""
    if several and "front" not in f:
        _table(f, "front", schema.FRONT_DTYPE, compress=False)
    elif not several and "front" in f:
        del f["front"]


def values_dataset(f: h5py.File, name: str, names: Sequence[str], rows: int) -> None:
    """``metrics`` or ``observed``: float64 (rows, len(names)), names in the attribute ``names``.

    Absent when there are no names, since HDF5 chunks cannot be empty."""
    if names:
        ds = f.create_dataset(
            name,
            shape=(rows, len(names)),
            maxshape=(None, len(names)),
            dtype=np.float64,
            chunks=(_CHUNK_ROWS, len(names)),
            fillvalue=np.nan,
            compression="gzip",
            fletcher32=True,
        )
        ds.attrs["names"] = json.dumps(list(names))


def value_names(f: h5py.File, name: str) -> list[str]:
    """The column names of ``metrics`` or ``observed``; none when the dataset is absent."""
    return json.loads(f[name].attrs["names"]) if name in f else []


def append_rows(ds: h5py.Dataset, rows: np.ndarray) -> None:
    """Grow a dataset by ``rows`` along its first axis (none: left as it is)."""
    if len(rows):
        n = ds.shape[0]
        ds.resize((n + len(rows), *ds.shape[1:]))
        ds[n:] = rows


def fixed_text(value: str, width: str | np.dtype) -> bytes:
    """Text for a fixed-length field: UTF-8, cut to the field's width."""
    return str(value).encode()[: _itemsize(width)]


@functools.lru_cache(maxsize=64)
def _itemsize(width: str | np.dtype) -> int:
    """Bytes of a text field: the dtype made once per width, not once per value written."""
    return np.dtype(width).itemsize
