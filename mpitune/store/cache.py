"""Writing the HDF5 file: results, timeline and runs of one tuning problem.

It is the resume cache and the data for analysis at once. Only rank 0 writes it, and it
is flushed after every batch, so a killed run loses at most the batch in flight. It is
written in HDF5's single-writer/multiple-reader mode (SWMR), so reports, plots and
``watch`` can read it while the run goes on; SWMR readers cannot follow variable-length
data, which is why every string is a fixed-length UTF-8 field. The layout comes from
mpitune/model/schema.py and is documented in docs/cache-format.md; it is plain compound
datasets, readable with nothing but h5py (reader.py reads it for mpitune's own verbs).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from mpitune.errors import CacheMismatchError, UserError
from mpitune.model.confirmation import DeviceFactor, Verdict
from mpitune.model.identity import ProblemIdentity
from mpitune.model.launches import Launch
from mpitune.model.objective import Objective
from mpitune.model.pareto import front_rows
from mpitune.model.result import Result, Scored, Status
from mpitune.model.schema import (
    ASKED_DTYPE,
    FRONT_DTYPE,
    IN_FLIGHT_DTYPE,
    LONG_TEXT,
    NAME_TEXT,
    RANKS_DTYPE,
    RUNS_DTYPE,
    SEARCH_DTYPE,
    SHORT_TEXT,
    TIMELINE_DTYPE,
)
from mpitune.model.timeline import PhaseRow
from mpitune.store import devices
from mpitune.store.files import claim_temporary, create_hdf5, discard, refuse_inputs
from mpitune.store.front import objective_values
from mpitune.store.history import History, read_history, search_digest
from mpitune.store.integrity import in_flight, repair, verify
from mpitune.store.layout import add_history, append_rows, lay_out, set_front, text, value_names, values_dataset
from mpitune.store.lock import WriterLock, h5_file, hold_writer_lock, lock_file
from mpitune.store.rows import result_rows
from mpitune.store.superblock import clear_write_flags, is_hdf5

log = logging.getLogger(__name__)


def refuse_unusable(path: str, *inputs: str) -> None:
    """Refuse a results path that can never become a cache, or a damaged one, or one of the run's
    ``inputs`` (its spec, the measured data a replay answers from) under any name, before any rank
    starts: found at start-up instead, it would cost every rank's start-up and end the job with an
    error, and a damaged file opened for writing may hang the writer in HDF5 or be changed by it.
    Reads the whole file once (``verify``), changing nothing."""
    refuse_inputs(path, *inputs)
    try:
        usable = not os.path.exists(path) or (os.path.isfile(path) and is_hdf5(path))
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    if not usable:
        raise UserError(f"{path} exists and is not an HDF5 file; pass --cache NEW.h5 or remove it")
    if os.path.exists(path):
        verify(path)


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


def _open_for_writing(path: str) -> h5py.File:
    try:
        return h5_file(path, "a", libver="latest")
    except OSError as exc:
        if "h5clear" not in str(exc) or not clear_write_flags(path):
            raise UserError(f"cannot open cache {path}: {exc}") from None
    log.warning("%s: the run that wrote it last was killed; its results are kept", path)
    return h5_file(path, "a", libver="latest")


def _values(names: Sequence[str], by_name: Sequence[Mapping[str, float]]) -> np.ndarray:
    """One row per dict, one column per name; NaN where a dict lacks the name."""
    return np.array([[d.get(n, math.nan) for n in names] for d in by_name], dtype=np.float64).reshape(
        len(by_name), len(names)
    )


class Cache:
    """Writer side, used by rank 0 only. ``objective`` names the metrics kept beside the
    results (recomputed for every recorded row by ``rewrite_metrics`` when a run resumes)."""

    def __init__(
        self,
        path: str,
        identity: ProblemIdentity,
        tune_params: dict[str, list[Any]],
        iterations: int,
        objective: Objective | None = None,
    ):
        self.path = path
        self.tune_params = tune_params
        self.objective = objective or Objective()
        self.observed_names = list(identity.observed_names)
        created = self._create(identity, iterations) if not os.path.exists(path) else None
        self._lock = created or hold_writer_lock(path)
        try:
            if not created:
                verify(path)  # before anything writes to it: a damaged file is refused unchanged
            self.file = _open_for_writing(path)
        except BaseException:
            self._lock.close()
            raise
        if "results" not in self.file:
            self.close()
            raise UserError(f"{path} is an HDF5 file but not an mpitune cache; choose another --cache")
        if self.file.attrs.get("problem_hash") != identity.digest():
            differ = identity.differing(self.file.attrs.get("problem", "{}"))
            self.close()
            raise CacheMismatchError(
                f"{path} holds results of a different problem ({', '.join(differ) or 'schema'} "
                f"differ); pass --cache NEW.h5 to tune this one into another file"
            )
        self.interrupted = in_flight(self.file)  # what a killed run left unmeasured
        runs = self.file["runs"]
        # How the last run ended, as its row says before repair marks a killed one: a silent
        # rank's end also leaves configurations in flight, but the run was not killed.
        self.last_status = runs[-1]["status"].decode(errors="replace") if len(runs) else ""
        for fixed in repair(self.file):
            log.warning("%s: %s", path, fixed)
        self._describe_objective()
        add_history(self.file)
        self.results = self.file["results"]
        self.timeline = self.file["timeline"]
        self.runs = self.file["runs"]
        self.ranks = self.file["ranks"]
        self.in_flight = self.file["in_flight"]
        self.asked = self.file["asked"]
        self.searches = self.file["searches"]
        self.metrics = self.file.get("metrics")
        self.observed = self.file.get("observed")
        self.front = self.file.get("front")
        self.run = -1
        self._placed: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # each rank's host and device
        # From here on no dataset or attribute may be created, only appended to and written.
        self.file.swmr_mode = True

    def _create(self, identity: ProblemIdentity, iterations: int) -> WriterLock | None:
        """Build the file under a name of its own, lock it and link it into place: a run killed
        while creating it leaves no half-made cache behind, and of two runs creating the same
        file at once one writes it and the other finds it locked. None if another run made the
        file first. The name of its own is a temporary one of ``files.claim_temporary``."""
        partial, new = claim_temporary(self.path, lambda temporary: create_hdf5(temporary, self.path))
        try:
            with new as f:
                lay_out(f, identity, self.tune_params, iterations)
            lock = lock_file(partial, f"{self.path}: the new file was locked by another process", self.path)
            try:
                os.link(partial, self.path)
            except FileExistsError:
                lock.close()
                return None
            return lock
        finally:
            discard(partial)

    def _describe_objective(self) -> None:
        """Record this run's objective, and lay out the metrics dataset for its metrics: the
        old one is replaced if the names differ (the values are derived, ``rewrite_metrics``
        recomputes them). Before SWMR mode, which allows no new datasets or attributes."""
        self.file.attrs["objective"] = json.dumps(self.objective.record())
        names = self.objective.metric_names
        if value_names(self.file, "metrics") != names:
            if "metrics" in self.file:
                del self.file["metrics"]
            values_dataset(self.file, "metrics", names, len(self.file["results"]))
        set_front(self.file, self.objective.several)

    def recorded(self) -> list[Result]:
        """Every configuration measured in earlier runs, to tell the strategy on resume."""
        rows = self.results[...]
        names = rows.dtype.names or ()
        observed = self.observed[...] if self.observed is not None else np.zeros((len(rows), 0))
        return [
            Result(
                config_id=int(r["config_id"]),
                status=Status(r["status"].decode(errors="replace")),
                time_ms=float(r["time_ms"]),
                times_ms=tuple(float(t) for t in r["times_ms"] if not math.isnan(t)),
                compile_s=float(r["compile_s"]),
                verify_s=float(r["verify_s"]),
                benchmark_s=float(r["benchmark_s"]),
                raced=bool(r["raced"]) if "raced" in names else False,
                observed=dict(zip(self.observed_names, map(float, values))),
            )
            for r, values in zip(rows, observed)
        ]

    def rewrite_metrics(self, results: Sequence[Scored]) -> None:
        """The metrics of every recorded row, ``results`` in row order as ``recorded`` gave them
        and evaluated by this run's objective: a resumed run may define other metrics."""
        if self.metrics is not None:
            self.metrics.resize((len(results), self.metrics.shape[1]))
            self.metrics[...] = _values(self.objective.metric_names, [r.metrics for r in results])
            self.file.flush()

    def start_run(
        self,
        info: RunInfo,
        hosts: Sequence[str],
        devices: Sequence[str],
        pids: Sequence[int],
        details: Sequence[str] = (),
    ) -> int:
        """Record a new run and where its ranks are; ``details`` says which device exactly
        (index, PCI bus, UUID of a GPU), one per rank."""
        self.run = len(self.runs)
        row = np.zeros(1, RUNS_DTYPE)
        row[0] = (
            self.run,
            info.started_unix,
            math.nan,
            info.ranks,
            text(info.strategy, NAME_TEXT),
            info.seed,
            -1 if info.max_fevals is None else info.max_fevals,
            math.nan if info.time_limit_s is None else info.time_limit_s,
            info.batch_size,
            info.space_size,
            0,
            b"running",
            text(info.command, LONG_TEXT),
            text(info.version, SHORT_TEXT),
        )
        append_rows(self.runs, row)
        ranks = np.zeros(len(hosts), RANKS_DTYPE)
        details = list(details) or [""] * len(hosts)
        for rank, (host, device, detail, pid) in enumerate(zip(hosts, devices, details, pids)):
            ranks[rank] = (self.run, rank, text(host, NAME_TEXT), text(device, NAME_TEXT), text(detail, NAME_TEXT), pid)
        append_rows(self.ranks, ranks)
        self._placed = (tuple(hosts), tuple(devices))
        self.file.flush()
        return self.run

    def append(
        self, scored: Sequence[Scored], phases: Iterable[tuple[int, PhaseRow]], done_batch: int | None = None
    ) -> None:
        """Write one batch (its scored results and the ranks' timeline rows) and flush; the batch
        ``done_batch`` is no longer in flight (None: no batch is), while a later one may be."""
        append_rows(
            self.results, result_rows(self.results.dtype, list(self.tune_params), scored, self._placed, self.run)
        )
        for ds, names, values in (
            (self.metrics, self.objective.metric_names, [r.metrics for r in scored]),
            (self.observed, self.observed_names, [r.observed for r in scored]),
        ):
            if ds is not None and scored:
                ds.resize((ds.shape[0] + len(scored), ds.shape[1]))
                ds[-len(scored) :] = _values(names, values)
        held = self.in_flight[...]
        self._keep_in_flight(held[held["batch"] != done_batch] if done_batch is not None else held[:0])
        self.append_phases(phases, flush=False)
        self.file.flush()

    def hand_out(self, batch: int, chunks: Sequence[Sequence[int]], requested: int, asked: Sequence[int]) -> None:
        """Record which rank holds which configurations until their results are appended, so
        that after a crash the file says what was lost and where (beside the batch still in
        flight before it, if any); and the ask that made the batch (``asked``, in the
        strategy's order, for ``requested`` ids), which a resumed run replays to rebuild its
        strategy."""
        self._hold(batch, list(enumerate(chunks)))
        append_rows(self.asked, np.array([(self.run, batch, requested, i) for i in asked], dtype=ASKED_DTYPE))
        self.file.flush()

    def still_in_flight(self, batch: int, chunks: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Record again, after ``append`` of the batch cleared its record, the chunks (rank, ids)
        whose results never came: a rank that stopped answering held them, and ``check`` names
        them as it names what a killed run held."""
        self._hold(batch, chunks)
        self.file.flush()

    def _hold(self, batch: int, chunks: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Add a batch's chunks to the record; what a killed run before this one left there was
        reported when the file was opened (``interrupted``) and goes."""
        held = self.in_flight[...]
        rows = np.array([(self.run, batch, rank, i) for rank, ids in chunks for i in ids], dtype=IN_FLIGHT_DTYPE)
        self._keep_in_flight(np.concatenate([held[held["run"] == self.run], rows]))

    def _keep_in_flight(self, rows: np.ndarray) -> None:
        self.in_flight.resize((len(rows),))
        self.in_flight[:] = rows

    def append_phases(self, phases: Iterable[tuple[int, PhaseRow]], flush: bool = True) -> None:
        rows = np.array(
            [
                (self.run, rank, p.batch, p.config_id, text(p.phase, SHORT_TEXT), p.start_s, p.end_s)
                for rank, p in phases
            ],
            dtype=TIMELINE_DTYPE,
        )
        append_rows(self.timeline, rows)
        if flush:
            self.file.flush()

    def finish_run(self, wall_s: float, status: str, measured: int) -> None:
        """Record how the run ended and, with several objectives, the Pareto front of every
        configuration the file holds."""
        row = self.runs[self.run]
        row["wall_s"], row["status"], row["measured"] = wall_s, text(status, SHORT_TEXT), measured
        self.runs[self.run] = row
        if self.front is not None:
            self._record_front()
        self.file.flush()

    def _record_front(self) -> None:
        """Computed as a reader computes it (``CacheData.front_rows``), from the stored rows."""
        rows = self.results[...]
        tables = {
            **self._columns(self.metrics, self.objective.metric_names),
            **self._columns(self.observed, self.observed_names),
        }
        ok = rows["status"] == Status.OK.encode()
        values = objective_values(self.objective.names, lambda n: tables[n] if n in tables else rows[n], ok)
        ids = rows["config_id"][front_rows(values, self.objective.directions)]
        front = np.zeros(len(ids), FRONT_DTYPE)
        front["config_id"] = ids
        self.front.resize((len(front),))
        if len(front):
            self.front[:] = front

    @staticmethod
    def _columns(ds: h5py.Dataset | None, names: Sequence[str]) -> dict[str, np.ndarray]:
        table = ds[...] if ds is not None else np.zeros((0, len(names)))
        return {name: table[:, j] for j, name in enumerate(names)}

    def end_search(self, key: str, continuable: bool) -> None:
        """Record that this run's search ended cleanly: the next run with the same ``key``
        (strategy, seed, options, objective) continues it, if ``continuable``."""
        append_rows(self.searches, np.array([(self.run, search_digest(key).encode(), continuable)], dtype=SEARCH_DTYPE))
        self.file.flush()

    def append_confirmation(
        self,
        batch: int,
        launches: Sequence[tuple[int, Launch]],
        verdict: Verdict | None,
        started_s: float,
        finished_s: float,
    ) -> None:
        """Record a confirmation of this run, handed out as ``batch`` (store/devices.py), and flush."""
        devices.write_confirmation(self.file, self.run, batch, launches, verdict, started_s, finished_s)

    def append_calibration(
        self, batch: int, launches: Sequence[tuple[int, Launch]], factors: Sequence[DeviceFactor]
    ) -> None:
        """Record the reference's launches that came with ``batch`` and the factors estimated
        since (none: no new estimate); written with the batch's results, by ``append``."""
        devices.write_launches(self.file, self.run, batch, launches, devices.CALIBRATE)
        if factors:
            devices.write_factors(self.file, self.run, batch, factors, devices.CALIBRATE)

    def confirmed_candidates(self) -> frozenset[int]:
        """The candidates the file's latest confirmation judged (empty: none)."""
        return devices.latest_candidates(self.file)

    def history(self) -> History:
        """The recorded asks and search ends, and the run and batch of every results row."""
        return read_history(self.file)

    def close(self) -> None:
        self.file.close()
        self._lock.close()
