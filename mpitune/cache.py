"""The HDF5 file: results, timeline and runs of one tuning problem.

It is the resume cache and the data for analysis at once. Only rank 0 writes it, and it
is flushed after every batch, so a killed run loses at most the batch in flight. The
layout is documented in docs/cache-format.md; it is plain compound datasets, readable
with nothing but h5py.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import h5py
import numpy as np

from .errors import CacheMismatchError, UserError
from .result import Result
from .timeline import PhaseRow

SCHEMA_VERSION = 1
_STR = h5py.string_dtype()
_CHUNK_ROWS = 256


def problem_hash(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _param_dtype(values: list):
    if isinstance(values[0], str):
        return _STR
    return np.float64 if any(isinstance(v, float) for v in values) else np.int64


def results_dtype(tune_params: dict[str, list], iterations: int) -> np.dtype:
    return np.dtype(
        [("config_id", np.int64)]
        + [(name, _param_dtype(values)) for name, values in tune_params.items()]
        + [("status", _STR), ("time_ms", np.float64), ("times_ms", np.float64, (iterations,)),
           ("compile_s", np.float64), ("verify_s", np.float64), ("benchmark_s", np.float64),
           ("run", np.int32), ("batch", np.int64), ("rank", np.int32), ("host", _STR),
           ("device", _STR), ("started_s", np.float64), ("finished_s", np.float64),
           ("error", _STR)])


TIMELINE_DTYPE = np.dtype([("run", np.int32), ("rank", np.int32), ("batch", np.int64),
                           ("config_id", np.int64), ("phase", _STR), ("start_s", np.float64),
                           ("end_s", np.float64)])
RUNS_DTYPE = np.dtype([("run", np.int32), ("started_unix", np.float64), ("wall_s", np.float64),
                       ("ranks", np.int32), ("strategy", _STR), ("seed", np.int64),
                       ("max_fevals", np.int64), ("time_limit_s", np.float64),
                       ("batch_size", np.int32), ("space_size", np.int64), ("measured", np.int64), ("status", _STR),
                       ("command", _STR), ("version", _STR)])
RANKS_DTYPE = np.dtype([("run", np.int32), ("rank", np.int32), ("host", _STR), ("device", _STR),
                        ("pid", np.int64)])


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


def _append(ds: h5py.Dataset, rows: np.ndarray) -> None:
    if len(rows):
        n = ds.shape[0]
        ds.resize((n + len(rows),))
        ds[n:] = rows


class Cache:
    """Writer side, used by rank 0 only."""

    def __init__(self, path: str, identity: dict, tune_params: dict[str, list], iterations: int):
        self.path = path
        self.tune_params = tune_params
        digest = problem_hash(identity)
        exists = os.path.exists(path)
        try:
            self.file = h5py.File(path, "a")
        except OSError as exc:
            raise UserError(f"cannot open cache {path}: {exc}") from None
        if not exists or "results" not in self.file:
            self._create(identity, digest, iterations)
        elif self.file.attrs.get("problem_hash") != digest:
            stored = json.loads(self.file.attrs.get("problem", "{}"))
            differ = sorted(k for k in set(stored) | set(identity) if stored.get(k) != identity.get(k))
            self.file.close()
            raise CacheMismatchError(
                f"{path} holds results of a different problem ({', '.join(differ) or 'schema'} "
                f"differ); pass --cache NEW.h5 to tune this one into another file")
        self.results = self.file["results"]
        self.timeline = self.file["timeline"]
        self.runs = self.file["runs"]
        self.ranks = self.file["ranks"]
        self.run = -1

    def _create(self, identity: dict, digest: str, iterations: int) -> None:
        f = self.file
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["problem_hash"] = digest
        f.attrs["problem"] = json.dumps(identity, sort_keys=True)
        f.attrs["param_names"] = json.dumps(list(self.tune_params))
        for name, dtype in (("results", results_dtype(self.tune_params, iterations)),
                            ("timeline", TIMELINE_DTYPE), ("runs", RUNS_DTYPE), ("ranks", RANKS_DTYPE)):
            f.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype,
                             chunks=(_CHUNK_ROWS,), compression="gzip" if name != "runs" else None)
        f.flush()

    def recorded(self) -> list[Result]:
        """Every configuration measured in earlier runs, to tell the strategy on resume."""
        rows = self.results[...]
        return [Result(config_id=int(r["config_id"]), status=r["status"].decode(),
                       time_ms=float(r["time_ms"]), compile_s=float(r["compile_s"]),
                       verify_s=float(r["verify_s"]), benchmark_s=float(r["benchmark_s"]))
                for r in rows]

    def start_run(self, info: RunInfo, hosts: Sequence[str], devices: Sequence[str],
                  pids: Sequence[int]) -> int:
        self.run = len(self.runs)
        row = np.zeros(1, RUNS_DTYPE)
        row[0] = (self.run, info.started_unix, math.nan, info.ranks, info.strategy, info.seed,
                  -1 if info.max_fevals is None else info.max_fevals,
                  math.nan if info.time_limit_s is None else info.time_limit_s,
                  info.batch_size, info.space_size, 0, "running", info.command, info.version)
        _append(self.runs, row)
        ranks = np.zeros(len(hosts), RANKS_DTYPE)
        for rank, (host, device, pid) in enumerate(zip(hosts, devices, pids)):
            ranks[rank] = (self.run, rank, host, device, pid)
        _append(self.ranks, ranks)
        self.file.flush()
        return self.run

    def append(self, results: Iterable[Result], configs: Sequence[dict], hosts: Sequence[str],
               devices: Sequence[str], phases: Iterable[tuple[int, PhaseRow]]) -> None:
        """Write one batch (results with their configs, and timeline rows) and flush."""
        results = list(results)
        rows = np.zeros(len(results), self.results.dtype)
        iterations = self.results.dtype["times_ms"].shape[0]
        for i, (r, config) in enumerate(zip(results, configs)):
            times = np.full(iterations, np.nan)
            times[: len(r.times_ms)] = r.times_ms[:iterations]
            rows[i] = ((r.config_id,) + tuple(config[n] for n in self.tune_params)
                       + (r.status, r.time_ms, times, r.compile_s, r.verify_s, r.benchmark_s,
                          self.run, r.batch, r.rank, hosts[r.rank], devices[r.rank],
                          r.started_s, r.finished_s, r.error))
        _append(self.results, rows)
        self.append_phases(phases, flush=False)
        self.file.flush()

    def append_phases(self, phases: Iterable[tuple[int, PhaseRow]], flush: bool = True) -> None:
        rows = np.array([(self.run, rank, p.batch, p.config_id, p.phase, p.start_s, p.end_s)
                         for rank, p in phases], dtype=TIMELINE_DTYPE)
        _append(self.timeline, rows)
        if flush:
            self.file.flush()

    def finish_run(self, wall_s: float, status: str, measured: int) -> None:
        row = self.runs[self.run]
        row["wall_s"], row["status"], row["measured"] = wall_s, status, measured
        self.runs[self.run] = row
        self.file.flush()

    def save_strategy(self, key: str, state: bytes) -> None:
        """The strategy's pickled state, so that a resumed run continues its search."""
        if "strategy_state" in self.file:
            del self.file["strategy_state"]
        ds = self.file.create_dataset("strategy_state", data=np.frombuffer(state, dtype=np.uint8))
        ds.attrs["key"] = key
        self.file.flush()

    def load_strategy(self, key: str) -> bytes | None:
        ds = self.file.get("strategy_state")
        if ds is None or ds.attrs.get("key") != key:
            return None
        return ds[...].tobytes()

    def close(self) -> None:
        self.file.close()


def read(path: str) -> dict:
    """Everything in a cache file as numpy structured arrays plus the problem description."""
    try:
        with h5py.File(path, "r") as f:
            if "results" not in f:
                raise UserError(f"{path} is not an mpitune cache (no results dataset)")
            return {
                "schema_version": int(f.attrs["schema_version"]),
                "problem": json.loads(f.attrs["problem"]),
                "param_names": json.loads(f.attrs["param_names"]),
                **{name: _decoded(f[name][...]) for name in ("results", "timeline", "runs", "ranks")},
            }
    except (OSError, KeyError) as exc:
        raise UserError(f"cannot read cache {path}: {exc}") from None


def _decoded(rows: np.ndarray) -> np.ndarray:
    """h5py returns variable-length strings inside compound rows as bytes; make them str."""
    for name in rows.dtype.names:
        if rows.dtype[name] == object:
            rows[name] = [v.decode() if isinstance(v, bytes) else v for v in rows[name]]
    return rows
