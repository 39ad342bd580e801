"""Writing the HDF5 file: results, timeline and runs of one tuning problem.

Longer than 400 lines: one writer, whose every record goes through the same custody and write-out.

It is the resume cache and the data for analysis at once. Only rank 0 writes it.

Each write is kept in memory at once (custody.Kept). It is then written out to the file, with
everything before it, and flushed. Most writes go out at once. The frequent writes of a run
(reports, hand-outs, timeline rows) wait at most ``write_within_s`` after the oldest write not yet
written (``write_pending``). A run's rank 0 also writes them before it waits and at every stop
(scheduling/rounds.py). So a killed run loses only what was in flight and what rank 0 recorded in
that last moment. And a busy rank 0 resizes and flushes each dataset once per moment, not once
per report.

It is written in HDF5's single-writer/multiple-reader mode (SWMR). So reports, plots and ``watch``
read it while the run goes on. SWMR readers cannot follow variable-length data, hence fixed-length
UTF-8 strings. The layout comes from mpitune/model/schema.py (docs/cache-format.md). It is plain
compound datasets, readable with nothing but h5py. reader.py reads it for mpitune's own verbs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import h5py
import numpy as np

from mpitune.errors import CacheMismatchError, UserError
from mpitune.model.identity import ProblemIdentity
from mpitune.model.judging.confirmation import DeviceFactor, Verdict
from mpitune.model.judging.pareto import front_rows
from mpitune.model.objective import Objective
from mpitune.model.result import Result, Scored, Status
from mpitune.model.schema import FRONT_DTYPE, IN_FLIGHT_DTYPE, SEARCH_DTYPE, SHORT_TEXT
from mpitune.model.timeline import PhaseRow
from mpitune.model.work import Launch
from mpitune.store import devices
from mpitune.store.custody import Custody, CustodyLost, Kept, Loss, let_go
from mpitune.store.files import claim_temporary, create_hdf5, discard
from mpitune.store.history import History, ask_rows, prior_rows, read_history, schedule_rows, search_digest
from mpitune.store.integrity import in_flight, open_for_writing, repair, verify
from mpitune.store.layout import add_history, fixed_text, lay_out, set_front, value_names, values_dataset
from mpitune.store.lock import WriterLock, hold_writer_lock, lock_file
from mpitune.store.rows import RunInfo as RunInfo  # where callers have always found it
from mpitune.store.rows import (
    objective_values,
    phase_rows,
    rank_rows,
    result_rows,
    rows_as_results,
    run_row,
    values_table,
)

log = logging.getLogger(__name__)

# How long a run's rank 0 may hold recorded rows before writing them (docs/reliability.md, "A job
# that is killed"): one write-out and flush per half second instead of one per report.
WRITE_WITHIN_S = 0.5


class Cache:
    """Writer side, used by rank 0 only.

    ``objective`` names the metrics kept beside the results. ``rewrite_metrics`` recomputes them
    for every recorded row when a run resumes. ``write_within_s`` is how long the frequent writes
    may wait in memory (0: written at once).
    """

    def __init__(
        self,
        path: str,
        identity: ProblemIdentity,
        tune_params: dict[str, list[Any]],
        iterations: int,
        objective: Objective | None = None,
        write_within_s: float = 0.0,
    ):
        self.path = path
        self.write_within_s = write_within_s
        self._unwritten_since: float | None = None  # monotonic time of the oldest write not written out
        self._custody: Custody | None = None  # while the run writes the file
        self._loss: Loss | None = None  # the path lost: the file beside it that holds the rows
        self.tune_params = tune_params
        self.objective = objective or Objective()
        self.observed_names = list(identity.observed_names)
        created = self._create(identity, iterations) if not os.path.exists(path) else None
        self._lock = created or hold_writer_lock(path)
        try:
            if not created:
                verify(path)  # before anything writes to it: a damaged file is refused unchanged
            self.file = open_for_writing(path)
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
        self.run = -1
        self._placed: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # each rank's host and device
        self._adopt(path)

    def _adopt(self, path: str) -> None:
        """Write ``self.file``, which ``path`` names, from here on.

        No dataset or attribute may be created any more. Datasets are only appended to and
        written, each write through ``Kept``.
        """
        self.results = self.file["results"]
        self.in_flight = self.file["in_flight"]
        self.metrics = self.file.get("metrics")
        self.observed = self.file.get("observed")
        self.front = self.file.get("front")
        self.file.swmr_mode = True
        self.file.flush()
        self._kept = Kept(self.file)
        self._custody = Custody(path, self._lock)

    @contextmanager
    def _writing(self, deferred: bool = False) -> Iterator[None]:
        """One write, to memory (``Kept``).

        It is then written out with every write before it. That happens at once or, where
        ``deferred``, once it is due (``write_pending``).
        """
        assert self._custody is not None, "the file is closed"
        yield
        if self._unwritten_since is None:
            self._unwritten_since = time.monotonic()
        self.write_pending(now=not deferred)

    @property
    def unwritten(self) -> bool:
        """Whether a write waits in memory for the next write-out."""
        return self._unwritten_since is not None

    def write_pending(self, now: bool = True) -> None:
        """Write out what memory holds and the file does not, and flush.

        That happens now, or (``now`` False) once ``write_within_s`` have passed since the oldest
        such write. First comes a check that the path still names the file as this writer left it
        (custody.py). If not, everything recorded goes to a new file beside the path. That file is
        written from then on.
        """
        since = self._unwritten_since
        if since is None or (not now and time.monotonic() - since < self.write_within_s):
            return
        assert self._custody is not None, "the file is closed"
        what = self._custody.lost()
        if what is not None:
            self._kept.detach()
            try:
                self._loss, lock = self._custody.rescue(what, self._kept)
            finally:  # rescued or not, the lost file is let go of
                self._custody = None
                let_go(self.file)
                self._lock.close()
            self._lock = lock
            self.file = h5py.File(self._loss.kept_in, "a", libver="latest")
            self._adopt(self._loss.kept_in)
        else:
            self._kept.write_out()
        self.file.flush()
        assert self._custody is not None
        self._custody.stamp()
        self._unwritten_since = None

    @property
    def lost(self) -> CustodyLost | None:
        """Why the rows are not at ``path`` but beside it, and where. None: they are at ``path``."""
        return None if self._loss is None else self._loss.error(self._kept.count("results"))

    def _create(self, identity: ProblemIdentity, iterations: int) -> WriterLock | None:
        """Build the file under a name of its own, lock it and link it into place.

        So a run killed while creating it leaves no half-made cache behind. Of two runs creating
        the same file at once, one writes it and the other finds it locked. None if another run
        made the file first. The name of its own is a temporary one of ``files.claim_temporary``.
        """
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
        """Record this run's objective, and lay out the metrics dataset for its metrics.

        The old dataset is replaced if the names differ. Its values are derived:
        ``rewrite_metrics`` recomputes them. This runs before SWMR mode, which allows no new
        datasets or attributes.
        """
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
        observed = self.observed[...] if self.observed is not None else np.zeros((len(rows), 0))
        return rows_as_results(rows, [dict(zip(self.observed_names, map(float, values))) for values in observed])

    def rewrite_metrics(self, results: Sequence[Scored]) -> None:
        """The metrics of every recorded row, evaluated by this run's objective.

        ``results`` are in row order, as ``recorded`` gave them. A resumed run may define other
        metrics.
        """
        if self.metrics is not None:
            with self._writing():
                self._kept.replace("metrics", values_table(self.objective.metric_names, [r.metrics for r in results]))

    def start_run(
        self,
        info: RunInfo,
        hosts: Sequence[str],
        devices: Sequence[str],
        pids: Sequence[int],
        details: Sequence[str] = (),
    ) -> int:
        """Record a new run and where its ranks are.

        ``details`` says which device exactly, one per rank: index, PCI bus, UUID of a GPU.
        """
        self.run = self._kept.count("runs")
        row = run_row(self.run, info)
        ranks = rank_rows(self.run, hosts, devices, pids, details)
        with self._writing():
            self._kept.append("runs", row)
            self._kept.append("ranks", ranks)
            self._kept.append("priors", prior_rows(self.run, info.priors))
            self._kept.append("schedules", schedule_rows(self.run, info.schedule))
        self._placed = (tuple(hosts), tuple(devices))
        return self.run

    def append(
        self,
        scored: Sequence[Scored],
        phases: Iterable[tuple[int, PhaseRow]],
        done_batch: int | None = None,
        done_rank: int | None = None,
    ) -> None:
        """Write one batch and flush: its scored results and the ranks' timeline rows.

        The batch ``done_batch`` is then no longer in flight (None: every one), or its chunk of
        ``done_rank`` is not.
        """
        rows = result_rows(self.results.dtype, list(self.tune_params), scored, self._placed, self.run)
        with self._writing(deferred=True):
            self._kept.append("results", rows)
            for name, names, values in (
                ("metrics", self.objective.metric_names, [r.metrics for r in scored]),
                ("observed", self.observed_names, [r.observed for r in scored]),
            ):
                if names and scored:  # the dataset exists where it has columns (layout.values_dataset)
                    self._kept.append(name, values_table(names, values))
            held = self._kept.rows("in_flight")
            done = (held["batch"] == done_batch) & ((held["rank"] == done_rank) | (done_rank is None))
            self._kept.replace("in_flight", held[~done] if done_batch is not None else held[:0])
            self._kept.append("timeline", phase_rows(self.run, phases))

    def hand_out(
        self, batch: int, chunks: Sequence[Sequence[int]], requested: int, asked: Sequence[int], told: int | None = None
    ) -> None:
        """Record which rank holds which configurations until their results are appended.

        After a crash the file says what was lost and where. The ask that made the hand-out is
        recorded too. ``asked`` is in the strategy's order, for ``requested`` ids, once ``told`` of
        this run's rows were told.
        """
        with self._writing(deferred=True):
            self._hold(batch, list(enumerate(chunks)))
            for name, rows in ask_rows(self.run, batch, requested, asked, told).items():
                self._kept.append(name, rows)

    def still_in_flight(self, batch: int, chunks: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Record again the chunks (rank, ids) whose results never came.

        ``append`` of the batch cleared their record. A rank that stopped answering held them.
        ``check`` names them as it names what a killed run held.
        """
        with self._writing():
            self._hold(batch, chunks)

    def _hold(self, batch: int, chunks: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Add a batch's chunks to the record.

        What a killed run before this one left there goes. It was reported when the file was opened
        (``interrupted``).
        """
        held = self._kept.rows("in_flight")
        rows = np.array([(self.run, batch, rank, i) for rank, ids in chunks for i in ids], dtype=IN_FLIGHT_DTYPE)
        self._kept.replace("in_flight", np.concatenate([held[held["run"] == self.run], rows]))

    def append_phases(self, phases: Iterable[tuple[int, PhaseRow]]) -> None:
        """Write timeline rows on their own, with no results (``append`` writes those with them)."""
        with self._writing(deferred=True):
            self._kept.append("timeline", phase_rows(self.run, phases))

    def finish_run(self, wall_s: float, status: str, measured: int) -> None:
        """Record how the run ended.

        With several objectives, record the Pareto front of every configuration the file holds too.
        """
        row = self._kept.rows("runs")[self.run].copy()
        row["wall_s"] = wall_s
        row["status"] = fixed_text(status, SHORT_TEXT)
        row["measured"] = measured
        with self._writing():
            self._kept.put("runs", self.run, row)
            if self.front is not None:
                self._kept.replace("front", self._front())

    def _front(self) -> np.ndarray:
        """Computed as a reader computes it (``CacheData.front_rows``), from the stored rows."""
        rows = self._kept.rows("results")
        tables = {
            **self._columns("metrics", self.objective.metric_names),
            **self._columns("observed", self.observed_names),
        }
        ok = rows["status"] == Status.OK.encode()
        values = objective_values(self.objective.names, lambda n: tables[n] if n in tables else rows[n], ok)
        ids = rows["config_id"][front_rows(values, self.objective.directions)]
        front = np.zeros(len(ids), FRONT_DTYPE)
        front["config_id"] = ids
        return front

    def _columns(self, dataset: str, names: Sequence[str]) -> dict[str, np.ndarray]:
        table = self._kept.rows(dataset) if names else np.zeros((0, 0))
        return {name: table[:, j] for j, name in enumerate(names)}

    def end_search(self, key: str, continuable: bool) -> None:
        """Record that this run's search ended cleanly.

        If ``continuable``, the next run with the same ``key`` continues it. The key is the
        strategy, seed, options and objective.
        """
        row = np.array([(self.run, search_digest(key).encode(), continuable)], SEARCH_DTYPE)
        with self._writing():
            self._kept.append("searches", row)

    def append_confirmation(
        self,
        batch: int,
        launches: Sequence[tuple[int, Launch]],
        verdict: Verdict | None,
        started_s: float,
        finished_s: float,
        unmade: Sequence[tuple[int, Launch]] = (),
    ) -> None:
        """This run's part of a confirmation (``batch``): its launches, the ``unmade``, any verdict."""
        with self._writing(deferred=True):
            self._kept.append("retimed", devices.launch_rows(self.run, batch, launches, devices.CONFIRM))
            self._kept.append("retimed", devices.launch_rows(self.run, batch, unmade, devices.UNMADE))
            if verdict is not None:
                self._kept.append("confirmed", devices.confirmed_rows(self.run, verdict, started_s, finished_s))
                factors = devices.factor_rows(self.run, batch, verdict.factors, devices.CONFIRM)
                self._kept.append("device_factors", factors)

    def append_calibration(
        self, batch: int, launches: Sequence[tuple[int, Launch]], factors: Sequence[DeviceFactor]
    ) -> None:
        """Record the reference's launches that came with ``batch`` and any new factors."""
        with self._writing(deferred=True):
            self._kept.append("retimed", devices.launch_rows(self.run, batch, launches, devices.CALIBRATE))
            self._kept.append("device_factors", devices.factor_rows(self.run, batch, factors, devices.CALIBRATE))

    def confirmations(self) -> devices.Confirmations:
        """The file's latest verdict, and the confirmation a stop cut short (store/devices.py)."""
        return devices.confirmations(self._kept.rows)

    def history(self) -> History:
        """The recorded asks and search ends, and the run and batch of every results row."""
        return read_history(self.file)

    def close(self) -> None:
        """Close the file and release its lock.

        If the run is writing it, first check that the path still names it. If not, the rows go
        beside it, as on any write; ``lost`` says where.
        """
        if self._custody is not None:
            self._unwritten_since = self._unwritten_since or time.monotonic()
            self.write_pending()
        self._custody = None
        self.file.close()
        self._lock.close()
