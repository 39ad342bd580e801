"""Reading a cache file whole, as numpy arrays with their text decoded.

Report, plots, exports, ``watch`` and the pandas loader work on what it reads. A run may write
the file meanwhile (HDF5 SWMR). So every dataset is read as it stands, and ``metrics`` and
``observed`` are aligned to ``results`` here. A damaged file is an error of one line;
soundness.py says how reading it never hangs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

import h5py
import numpy as np

from mpitune.errors import UserError
from mpitune.model import schema
from mpitune.model.identity import ProblemIdentity
from mpitune.model.judging.pareto import front_rows
from mpitune.model.objective import Goal
from mpitune.model.result import Status
from mpitune.store.layout import layout_version, value_names
from mpitune.store.rows import objective_values
from mpitune.store.soundness import open_for_reading


@dataclass(frozen=True)
class CacheData:
    """Everything in a cache file.

    The structured arrays hold every text field as numpy str. ``metrics`` and ``observed`` are
    float64, one row per results row and one column per name in ``metric_names`` or
    ``observed_names``. They hold NaN where a row has no value.
    """

    schema_version: int
    problem: ProblemIdentity
    param_names: list[str]
    objective: Goal  # the latest run's; time, lower is better, in a file before metrics
    results: np.ndarray
    timeline: np.ndarray
    runs: np.ndarray
    ranks: np.ndarray
    metrics: np.ndarray
    metric_names: list[str]
    observed: np.ndarray
    observed_names: list[str]
    # The config ids of the Pareto front as the latest multi-objective run ended; None where the
    # file has none (one objective, or a run still going or killed before its end).
    recorded_front: np.ndarray | None = None
    # The devices compared (schema.RETIMED_COLUMNS): every launch of the calibrations and
    # confirmations, the verdict on each candidate and the device factors; empty in files without.
    retimed: np.ndarray = field(default_factory=lambda: _decoded(np.zeros(0, schema.RETIMED_DTYPE)))
    confirmed: np.ndarray = field(default_factory=lambda: np.zeros(0, schema.CONFIRMED_DTYPE))
    device_factors: np.ndarray = field(default_factory=lambda: _decoded(np.zeros(0, schema.DEVICE_FACTOR_DTYPE)))
    # The priors each run started from (schema.PRIOR_COLUMNS); empty in files without.
    priors: np.ndarray = field(default_factory=lambda: _decoded(np.zeros(0, schema.PRIOR_DTYPE)))
    # How each run handed out its work (schema.SCHEDULE_COLUMNS), and what each ask knew
    # (schema.TOLD_COLUMNS); empty in files without.
    schedules: np.ndarray = field(default_factory=lambda: _decoded(np.zeros(0, schema.SCHEDULE_DTYPE)))
    told: np.ndarray = field(default_factory=lambda: np.zeros(0, schema.TOLD_DTYPE))

    def schedule_of(self, run: int) -> str:
        """How run ``run`` handed out its work, as recorded.

        A file written before that was recorded says it another way. Only refilled runs recorded
        what each ask knew: such a run is ``refill``, any other ``batches``.
        """
        recorded = self.schedules["schedule"][self.schedules["run"] == run]
        if len(recorded):
            return str(recorded[0])
        return "refill" if bool((self.told["run"] == run).any()) else "batches"

    def objective_values(self) -> np.ndarray:
        """(rows, objectives): each objective's value per results row.

        A configuration that did not pass holds NaN.
        """
        return objective_values(self.objective.names, self.column, self.results["status"] == Status.OK)

    def front_rows(self) -> np.ndarray:
        """The results rows on the Pareto front of the recorded objectives.

        It is computed from the rows as they stand, by the rule of the front a run records.
        """
        return front_rows(self.objective_values(), self.objective.directions)

    def column(self, name: str) -> np.ndarray:
        """One value per results row: a metric, an observed value or a results field, by name."""
        for names, values in ((self.metric_names, self.metrics), (self.observed_names, self.observed)):
            if name in names:
                return values[:, names.index(name)]
        return self.results[name]


def read(path: str) -> CacheData:
    with _opened(path) as f, _guarded(path):
        results = with_defaults(_decoded(f["results"][...]))
        return _data(f, path, results, 0, _decoded(f["timeline"][...]))


def _data(f: h5py.File, path: str, results: np.ndarray, start: int, timeline: np.ndarray) -> CacheData:
    """The file with ``results`` (its rows from ``start`` on) and ``timeline``.

    The rows' metrics and observed values are aligned to them. Every other table is whole.
    """
    metric_names, observed_names = value_names(f, "metrics"), value_names(f, "observed")
    return CacheData(
        schema_version=layout_version(f).readable(path),
        problem=ProblemIdentity.from_json(f.attrs["problem"]),
        param_names=json.loads(f.attrs["param_names"]),
        objective=Goal.from_record(json.loads(f.attrs["objective"])) if "objective" in f.attrs else Goal(),
        results=results,
        timeline=timeline,
        runs=_decoded(f["runs"][...]),
        ranks=_decoded(f["ranks"][...]),
        metrics=_rows(f, "metrics", start, len(results), len(metric_names)),
        metric_names=metric_names,
        observed=_rows(f, "observed", start, len(results), len(observed_names)),
        observed_names=observed_names,
        recorded_front=f["front"]["config_id"][...] if "front" in f and f["front"].shape[0] else None,
        **{name: _decoded(f[name][...]) for name in _LATER_TABLES if name in f},
    )


def _opened(path: str) -> h5py.File:
    """The file open for reading, once it is an mpitune file."""
    with _guarded(path):
        f = open_for_reading(path)
        try:
            found = "results" in f
        except BaseException:
            f.close()
            raise
    if not found:
        f.close()
        raise UserError(f"{path} is not an mpitune cache (no results dataset)")
    return f


@contextmanager
def _guarded(path: str) -> Iterator[None]:
    """What HDF5 cannot read in the file, one line."""
    try:
        yield
    except (OSError, KeyError, RuntimeError, ValueError) as exc:
        raise UserError(f"cannot read cache {path}: {exc}") from None


# Tables files written before them lack.
_LATER_TABLES = (
    "retimed",
    "confirmed",
    "device_factors",
    "priors",
    "schedules",
    "told",
)  # tables files before them lack


def _rows(f: h5py.File, name: str, start: int, n: int, columns: int) -> np.ndarray:
    """Dataset ``name``'s ``n`` rows from ``start`` on.

    An SWMR reader may see a batch's results before its metrics, or after. Missing rows are NaN,
    and so is an absent dataset.
    """
    values = f[name][start : start + n] if name in f else np.zeros((0, 0))
    out = np.full((n, columns), np.nan)
    out[: min(n, len(values))] = values[:n]
    return out


def with_defaults(results: np.ndarray) -> np.ndarray:
    """The results of a file written before schema version 3, with the columns it lacks.

    Before version 2 these are ``launches``, the timed launches it holds, and ``raced``: 0, as
    racing did not exist. Before version 3 it is ``throttled``: empty, as nothing watched the
    GPU's clocks. Every consumer then sees one set of columns.
    """
    names = results.dtype.names or ()
    if "throttled" in names:
        return results
    fields = [(n, results.dtype[n]) for n in names]
    if "launches" not in names:
        at = names.index("benchmark_s") + 1
        fields = fields[:at] + [("launches", np.dtype(np.int32)), ("raced", np.dtype(np.int8))] + fields[at:]
    at = [n for n, _ in fields].index("raced") + 1
    fields = fields[:at] + [("throttled", np.dtype("U96"))] + fields[at:]
    out = np.zeros(results.shape, fields)
    for name in names:
        out[name] = results[name]
    if "launches" not in names:
        times = np.asarray(results["times_ms"], dtype=float).reshape(len(results), -1)
        out["launches"] = np.count_nonzero(~np.isnan(times), axis=1)
    return out


def _decoded(rows: np.ndarray) -> np.ndarray:
    """The same rows with every fixed-length UTF-8 field as str (numpy unicode)."""
    fields = [(name, rows.dtype[name]) for name in rows.dtype.names or ()]
    if not any(dt.kind == "S" for _, dt in fields):
        return rows
    out = np.empty(rows.shape, [(n, f"U{dt.itemsize}" if dt.kind == "S" else dt) for n, dt in fields])
    for name, dt in fields:
        out[name] = np.char.decode(rows[name], "utf-8", errors="replace") if dt.kind == "S" else rows[name]
    return out


CHUNK_ROWS = 4096  # results rows a streamed reader holds at once: 6 MB as stored, 25 MB decoded


class Rows(Protocol):
    """A file's rows, for what reads every one but keeps little of each (``report``).

    ``tables`` is the file without the rows of ``results`` and ``timeline``, which come a slice
    at a time. Every other table is whole. ``rows`` gives a few results rows by index.
    """

    @property
    def tables(self) -> CacheData: ...
    def results(self) -> Iterator[CacheData]: ...
    def timeline(self) -> Iterator[np.ndarray]: ...
    def rows(self, indices: Sequence[int] | np.ndarray) -> CacheData: ...


class Whole:
    """``Rows`` of a file read whole (``read``): one slice of everything."""

    def __init__(self, data: CacheData):
        self.data = data
        self.tables = _without_rows(data)

    def results(self) -> Iterator[CacheData]:
        yield self.data

    def timeline(self) -> Iterator[np.ndarray]:
        yield self.data.timeline

    def rows(self, indices: Sequence[int] | np.ndarray) -> CacheData:
        at = np.asarray(indices, dtype=np.int64)
        data = self.data
        return replace(self.tables, results=data.results[at], metrics=data.metrics[at], observed=data.observed[at])


class Streamed:
    """``Rows`` of an open file, ``CHUNK_ROWS`` at a time.

    A reader holds a slice, whatever the file's size. The rows are those the file held when it
    was opened; a run may be adding more.
    """

    def __init__(self, f: h5py.File, path: str):
        self._f, self._path = f, path
        with _guarded(path):
            self._results, self._timeline = len(f["results"]), len(f["timeline"])
            self.tables = _without_rows(_data(f, path, self._slice(0, 0), 0, _decoded(f["timeline"][:0])))

    def _slice(self, start: int, stop: int) -> np.ndarray:
        return with_defaults(_decoded(self._f["results"][start:stop]))

    def _aligned(self, start: int, stop: int) -> CacheData:
        """Results rows ``start`` to ``stop`` with their metrics and observed values."""
        f, t = self._f, self.tables
        with _guarded(self._path):
            results = self._slice(start, stop)
            return replace(
                t,
                results=results,
                metrics=_rows(f, "metrics", start, len(results), len(t.metric_names)),
                observed=_rows(f, "observed", start, len(results), len(t.observed_names)),
            )

    def results(self) -> Iterator[CacheData]:
        for start in range(0, self._results, CHUNK_ROWS):
            yield self._aligned(start, min(start + CHUNK_ROWS, self._results))

    def timeline(self) -> Iterator[np.ndarray]:
        for start in range(0, self._timeline, CHUNK_ROWS):
            with _guarded(self._path):
                rows = _decoded(self._f["timeline"][start : start + CHUNK_ROWS])
            yield rows

    def rows(self, indices: Sequence[int] | np.ndarray) -> CacheData:
        wanted = np.asarray(indices, dtype=np.int64)
        unique, back = np.unique(wanted, return_inverse=True)
        parts = [self._aligned(i, i + 1) for i in unique.tolist()]
        if not parts:
            return self.tables
        return replace(
            self.tables,
            results=np.concatenate([p.results for p in parts])[back],
            metrics=np.concatenate([p.metrics for p in parts])[back],
            observed=np.concatenate([p.observed for p in parts])[back],
        )


@contextmanager
def streamed(path: str) -> Iterator[Streamed]:
    """The file's ``Rows``, read a slice at a time while it is open."""
    with _opened(path) as f:
        yield Streamed(f, path)


def _without_rows(data: CacheData) -> CacheData:
    return replace(
        data, results=data.results[:0], timeline=data.timeline[:0], metrics=data.metrics[:0], observed=data.observed[:0]
    )
