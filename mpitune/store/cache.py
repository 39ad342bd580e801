"""The HDF5 file: results, timeline and runs of one tuning problem.

It is the resume cache and the data for analysis at once. Only rank 0 writes it, and it
is flushed after every batch, so a killed run loses at most the batch in flight. It is
written in HDF5's single-writer/multiple-reader mode (SWMR), so reports, plots and
``watch`` can read it while the run goes on; SWMR readers cannot follow variable-length
data, which is why every string is a fixed-length UTF-8 field. The layout is documented
in docs/cache-format.md; it is plain compound datasets, readable with nothing but h5py.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO

import h5py
import numpy as np

from mpitune.errors import CacheMismatchError, UserError
from mpitune.model.objective import Objective
from mpitune.model.result import Result
from mpitune.model.timeline import PhaseRow
from mpitune.store.integrity import in_flight, repair
from mpitune.store.superblock import clear_write_flags

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_CHUNK_ROWS = 256
# Every flush compresses the last, partly filled chunk again: chunks of about 64 KiB keep that
# cost small for wide rows (a results row carries a 1 KiB error field).
_CHUNK_BYTES = 64 << 10


def _chunk_rows(dtype: np.dtype) -> int:
    return max(16, min(_CHUNK_ROWS, _CHUNK_BYTES // dtype.itemsize))
# Field widths in bytes of UTF-8; longer text is cut (compression makes the padding cheap).
_SHORT, _NAME, _TEXT = "S16", "S96", "S1024"


def _b(text: str, width: str) -> bytes:
    """Text for a fixed-length field: UTF-8, cut to the field's width."""
    return str(text).encode()[: np.dtype(width).itemsize]


def _key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).hexdigest().encode()


def problem_hash(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _param_dtype(values: list):
    if isinstance(values[0], str):
        return f"S{max(len(v.encode()) for v in values)}"
    return np.float64 if any(isinstance(v, float) for v in values) else np.int64


def results_dtype(tune_params: dict[str, list], iterations: int) -> np.dtype:
    return np.dtype(
        [("config_id", np.int64)]
        + [(name, _param_dtype(values)) for name, values in tune_params.items()]
        + [("status", _SHORT), ("time_ms", np.float64), ("times_ms", np.float64, (iterations,)),
           ("compile_s", np.float64), ("verify_s", np.float64), ("benchmark_s", np.float64),
           ("run", np.int32), ("batch", np.int64), ("rank", np.int32), ("host", _NAME),
           ("device", _NAME), ("started_s", np.float64), ("finished_s", np.float64),
           ("error", _TEXT)])


TIMELINE_DTYPE = np.dtype([("run", np.int32), ("rank", np.int32), ("batch", np.int64),
                           ("config_id", np.int64), ("phase", _SHORT), ("start_s", np.float64),
                           ("end_s", np.float64)])
RUNS_DTYPE = np.dtype([("run", np.int32), ("started_unix", np.float64), ("wall_s", np.float64),
                       ("ranks", np.int32), ("strategy", _NAME), ("seed", np.int64),
                       ("max_fevals", np.int64), ("time_limit_s", np.float64),
                       ("batch_size", np.int32), ("space_size", np.int64), ("measured", np.int64), ("status", _SHORT),
                       ("command", _TEXT), ("version", _SHORT)])
IN_FLIGHT_DTYPE = np.dtype([("run", np.int32), ("batch", np.int64), ("rank", np.int32), ("config_id", np.int64)])
RANKS_DTYPE = np.dtype([("run", np.int32), ("rank", np.int32), ("host", _NAME), ("device", _NAME),
                        ("device_detail", _NAME), ("pid", np.int64)])


@dataclass
class RunInfo:
    started_unix: float
    ranks: int
    strategy: str
    seed: int
    max_fevals: int | None
    time_limit_s: float | None
    batch_size: int
    space_size: int
    command: str
    version: str


def _writer_lock(path: str) -> IO:
    """An exclusive lock on PATH.lock for as long as this writer lives.

    HDF5 drops its own file lock in SWMR mode, and its open-for-write mark outlives a
    killed writer, so only this lock tells a live writer from a dead one.
    """
    lock = open(path + ".lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise UserError(f"another mpitune run is writing {path}; wait for it or use another --cache") from None
    return lock


def writer_alive(path: str) -> bool:
    """Whether a run is writing PATH now (it holds the writer lock)."""
    if not os.path.exists(path + ".lock"):
        return False
    try:
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
    except OSError:
        return True


def _open_for_writing(path: str) -> h5py.File:
    try:
        return h5py.File(path, "a", libver="latest")
    except OSError as exc:
        if "h5clear" not in str(exc) or not clear_write_flags(path):
            raise UserError(f"cannot open cache {path}: {exc}") from None
    log.warning("%s: the run that wrote it last was killed; its results are kept", path)
    return h5py.File(path, "a", libver="latest")


def _append(ds: h5py.Dataset, rows: np.ndarray) -> None:
    if len(rows):
        n = ds.shape[0]
        ds.resize((n + len(rows),))
        ds[n:] = rows


def _values(names: Sequence[str], by_name: Sequence[dict]) -> np.ndarray:
    """One row per dict, one column per name; NaN where a dict lacks the name."""
    return np.array([[d.get(n, math.nan) for n in names] for d in by_name], dtype=np.float64).reshape(
        len(by_name), len(names))


def _values_dataset(f: h5py.File, name: str, names: Sequence[str], rows: int) -> None:
    """``metrics`` or ``observed``: float64 (rows, len(names)), names in the attribute ``names``;
    absent when there are no names (HDF5 chunks cannot be empty)."""
    if names:
        ds = f.create_dataset(name, shape=(rows, len(names)), maxshape=(None, len(names)), dtype=np.float64,
                              chunks=(_CHUNK_ROWS, len(names)), fillvalue=np.nan, compression="gzip")
        ds.attrs["names"] = json.dumps(list(names))


def _names(f: h5py.File, name: str) -> list[str]:
    return json.loads(f[name].attrs["names"]) if name in f else []


class Cache:
    """Writer side, used by rank 0 only. ``objective`` names the metrics kept beside the
    results (recomputed for every recorded row by ``rewrite_metrics`` when a run resumes)."""

    def __init__(self, path: str, identity: dict, tune_params: dict[str, list], iterations: int,
                 objective: Objective | None = None):
        self.path = path
        self.tune_params = tune_params
        self.objective = objective or Objective()
        self.observed_names = list(identity.get("observed_names", []))
        digest = problem_hash(identity)
        self._lock = _writer_lock(path)
        try:
            if not os.path.exists(path):
                self._create(identity, digest, iterations)
            self.file = _open_for_writing(path)
        except BaseException:
            self._lock.close()
            raise
        if "results" not in self.file:
            self.close()
            raise UserError(f"{path} is an HDF5 file but not an mpitune cache; choose another --cache")
        if self.file.attrs.get("problem_hash") != digest:
            stored = json.loads(self.file.attrs.get("problem", "{}"))
            differ = sorted(k for k in set(stored) | set(identity) if stored.get(k) != identity.get(k))
            self.close()
            raise CacheMismatchError(
                f"{path} holds results of a different problem ({', '.join(differ) or 'schema'} "
                f"differ); pass --cache NEW.h5 to tune this one into another file")
        self.interrupted = in_flight(self.file)  # what a killed run left unmeasured
        for fixed in repair(self.file):
            log.warning("%s: %s", path, fixed)
        self._describe_objective()
        self.results = self.file["results"]
        self.timeline = self.file["timeline"]
        self.runs = self.file["runs"]
        self.ranks = self.file["ranks"]
        self.in_flight = self.file["in_flight"]
        self.strategy_state = self.file["strategy_state"]
        self.strategy_key = self.file["strategy_key"]
        self.metrics = self.file.get("metrics")
        self.observed = self.file.get("observed")
        self.run = -1
        # From here on no dataset or attribute may be created, only appended to and written.
        self.file.swmr_mode = True

    def _create(self, identity: dict, digest: str, iterations: int) -> None:
        """Build the file beside its final name and rename it into place: a run killed while
        creating it leaves no half-made cache behind."""
        partial = f"{self.path}.partial"
        with h5py.File(partial, "w", libver="latest") as f:
            self._layout(f, identity, digest, iterations)
        os.replace(partial, self.path)

    def _layout(self, f: h5py.File, identity: dict, digest: str, iterations: int) -> None:
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["problem_hash"] = digest
        f.attrs["problem"] = json.dumps(identity, sort_keys=True)
        f.attrs["param_names"] = json.dumps(list(self.tune_params))
        for name, dtype in (("results", results_dtype(self.tune_params, iterations)),
                            ("timeline", TIMELINE_DTYPE), ("runs", RUNS_DTYPE), ("ranks", RANKS_DTYPE)):
            f.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype,
                             chunks=(_chunk_rows(np.dtype(dtype)),), compression="gzip" if name != "runs" else None)
        f.create_dataset("strategy_state", shape=(0,), maxshape=(None,), dtype=np.uint8, chunks=(1 << 16,))
        f.create_dataset("strategy_key", shape=(1,), dtype="S64")
        f.create_dataset("in_flight", shape=(0,), maxshape=(None,), dtype=IN_FLIGHT_DTYPE, chunks=(_CHUNK_ROWS,))
        _values_dataset(f, "observed", self.observed_names, 0)

    def _describe_objective(self) -> None:
        """Record this run's objective, and lay out the metrics dataset for its metrics: the
        old one is replaced if the names differ (the values are derived, ``rewrite_metrics``
        recomputes them). Before SWMR mode, which allows no new datasets or attributes."""
        self.file.attrs["objective"] = json.dumps(self.objective.record())
        names = self.objective.metric_names
        if _names(self.file, "metrics") != names:
            if "metrics" in self.file:
                del self.file["metrics"]
            _values_dataset(self.file, "metrics", names, len(self.file["results"]))
    def recorded(self) -> list[Result]:
        """Every configuration measured in earlier runs, to tell the strategy on resume."""
        rows = self.results[...]
        observed = self.observed[...] if self.observed is not None else np.zeros((len(rows), 0))
        return [Result(config_id=int(r["config_id"]), status=r["status"].decode(errors="replace"),
                       time_ms=float(r["time_ms"]), times_ms=[float(t) for t in r["times_ms"] if not math.isnan(t)],
                       compile_s=float(r["compile_s"]), verify_s=float(r["verify_s"]),
                       benchmark_s=float(r["benchmark_s"]),
                       observed=dict(zip(self.observed_names, map(float, values))))
                for r, values in zip(rows, observed)]

    def rewrite_metrics(self, results: Sequence[Result]) -> None:
        """The metrics of every recorded row, ``results`` in row order as ``recorded`` gave them
        and evaluated by this run's objective: a resumed run may define other metrics."""
        if self.metrics is not None:
            self.metrics.resize((len(results), self.metrics.shape[1]))
            self.metrics[...] = _values(self.objective.metric_names, [r.metrics for r in results])
            self.file.flush()

    def start_run(self, info: RunInfo, hosts: Sequence[str], devices: Sequence[str],
                  pids: Sequence[int], details: Sequence[str] = ()) -> int:
        """Record a new run and where its ranks are; ``details`` says which device exactly
        (index, PCI bus, UUID of a GPU), one per rank."""
        self.run = len(self.runs)
        row = np.zeros(1, RUNS_DTYPE)
        row[0] = (self.run, info.started_unix, math.nan, info.ranks, _b(info.strategy, _NAME), info.seed,
                  -1 if info.max_fevals is None else info.max_fevals,
                  math.nan if info.time_limit_s is None else info.time_limit_s,
                  info.batch_size, info.space_size, 0, b"running", _b(info.command, _TEXT),
                  _b(info.version, _SHORT))
        _append(self.runs, row)
        ranks = np.zeros(len(hosts), RANKS_DTYPE)
        details = list(details) or [""] * len(hosts)
        for rank, (host, device, detail, pid) in enumerate(zip(hosts, devices, details, pids)):
            ranks[rank] = (self.run, rank, _b(host, _NAME), _b(device, _NAME), _b(detail, _NAME), pid)
        _append(self.ranks, ranks)
        self.file.flush()
        return self.run

    def append(self, results: Iterable[Result], configs: Sequence[dict], hosts: Sequence[str],
               devices: Sequence[str], phases: Iterable[tuple[int, PhaseRow]]) -> None:
        """Write one batch (results with their configs, and timeline rows) and flush."""
        results = list(results)
        dtype = self.results.dtype
        rows = np.zeros(len(results), dtype)
        iterations = dtype["times_ms"].shape[0]
        for i, (r, config) in enumerate(zip(results, configs)):
            times = np.full(iterations, np.nan)
            times[: len(r.times_ms)] = r.times_ms[:iterations]
            values = tuple(_b(config[n], dtype[n]) if isinstance(config[n], str) else config[n]
                           for n in self.tune_params)
            rows[i] = ((r.config_id,) + values
                       + (_b(r.status, _SHORT), r.time_ms, times, r.compile_s, r.verify_s, r.benchmark_s,
                          self.run, r.batch, r.rank, _b(hosts[r.rank], _NAME), _b(devices[r.rank], _NAME),
                          r.started_s, r.finished_s, _b(r.error, _TEXT)))
        _append(self.results, rows)
        for ds, names, values in ((self.metrics, self.objective.metric_names, [r.metrics for r in results]),
                                  (self.observed, self.observed_names, [r.observed for r in results])):
            if ds is not None and results:
                ds.resize((ds.shape[0] + len(results), ds.shape[1]))
                ds[-len(results):] = _values(names, values)
        self.in_flight.resize((0,))
        self.append_phases(phases, flush=False)
        self.file.flush()

    def hand_out(self, batch: int, chunks: Sequence[Sequence[int]]) -> None:
        """Record which rank holds which configurations until their results are appended, so
        that after a crash the file says what was lost and where."""
        rows = np.array([(self.run, batch, rank, i) for rank, ids in enumerate(chunks) for i in ids],
                        dtype=IN_FLIGHT_DTYPE)
        self.in_flight.resize((len(rows),))
        self.in_flight[:] = rows
        self.file.flush()

    def append_phases(self, phases: Iterable[tuple[int, PhaseRow]], flush: bool = True) -> None:
        rows = np.array([(self.run, rank, p.batch, p.config_id, _b(p.phase, _SHORT), p.start_s, p.end_s)
                         for rank, p in phases], dtype=TIMELINE_DTYPE)
        _append(self.timeline, rows)
        if flush:
            self.file.flush()

    def finish_run(self, wall_s: float, status: str, measured: int) -> None:
        row = self.runs[self.run]
        row["wall_s"], row["status"], row["measured"] = wall_s, _b(status, _SHORT), measured
        self.runs[self.run] = row
        self.file.flush()

    def save_strategy(self, key: str, state: bytes) -> None:
        """The strategy's pickled state, so that a resumed run continues its search; ``key``
        says which strategy, seed and options it belongs to."""
        self.strategy_state.resize((len(state),))
        self.strategy_state[:] = np.frombuffer(state, dtype=np.uint8)
        self.strategy_key[0] = _key_digest(key)
        self.file.flush()

    def load_strategy(self, key: str) -> bytes | None:
        if self.strategy_key[0] != _key_digest(key) or not len(self.strategy_state):
            return None
        return self.strategy_state[...].tobytes()

    def close(self) -> None:
        self.file.close()
        self._lock.close()


def read(path: str) -> dict:
    """Everything in a cache file as numpy structured arrays plus the problem description."""
    try:
        with open_for_reading(path) as f:
            if "results" not in f:
                raise UserError(f"{path} is not an mpitune cache (no results dataset)")
            data = {
                "schema_version": int(f.attrs["schema_version"]),
                "problem": json.loads(f.attrs["problem"]),
                "param_names": json.loads(f.attrs["param_names"]),
                "objective": json.loads(f.attrs.get("objective", json.dumps(Objective().record()))),
                **{name: _decoded(f[name][...]) for name in ("results", "timeline", "runs", "ranks")},
            }
            for name, names_key in (("metrics", "metric_names"), ("observed", "observed_names")):
                # Absent in files without metrics or observed values.
                values = f[name][...] if name in f else np.zeros((0, 0))
                data[names_key] = _names(f, name)
                data[name] = _rows(values, len(data["results"]), len(data[names_key]))
            return data
    except (OSError, KeyError, RuntimeError, ValueError) as exc:
        raise UserError(f"cannot read cache {path}: {exc}") from None


def _rows(values: np.ndarray, n: int, columns: int) -> np.ndarray:
    """``values`` with exactly ``n`` rows: an SWMR reader may see the results of a batch
    before its metrics, or after; missing rows are NaN."""
    out = np.full((n, columns), np.nan)
    out[: min(n, len(values))] = values[:n]
    return out


def open_for_reading(path: str) -> h5py.File:
    """As an SWMR reader while a run writes the file (or a killed one left it marked as being
    written), else plainly: an SWMR reader keeps retrying a damaged file for minutes, a
    plain one refuses it at once."""
    if not writer_alive(path):
        try:
            return h5py.File(path, "r")
        except OSError as exc:
            if "h5clear" not in str(exc):
                raise
    return h5py.File(path, "r", libver="latest", swmr=True)


def _decoded(rows: np.ndarray) -> np.ndarray:
    """The same rows with every fixed-length UTF-8 field as str (numpy unicode)."""
    fields = [(name, rows.dtype[name]) for name in rows.dtype.names]
    if not any(dt.kind == "S" for _, dt in fields):
        return rows
    out = np.empty(rows.shape, [(n, f"U{dt.itemsize}" if dt.kind == "S" else dt) for n, dt in fields])
    for name, dt in fields:
        out[name] = np.char.decode(rows[name], "utf-8", errors="replace") if dt.kind == "S" else rows[name]
    return out
