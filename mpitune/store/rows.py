"""The rows the writer appends: one batch of scored results as rows of the file's results
dataset, timeline rows, a run's row and its ranks'; and the objective values of the rows, by one
rule for the writer and the reader, so that the front a run records and the front a reader
computes from the same rows are the same."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mpitune.model.objective import TIME
from mpitune.model.prior import PriorSource
from mpitune.model.result import Scored
from mpitune.model.schema import LONG_TEXT, NAME_TEXT, RANKS_DTYPE, RUNS_DTYPE, SHORT_TEXT, TIMELINE_DTYPE
from mpitune.model.timeline import PhaseRow
from mpitune.store.layout import text


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
    priors: tuple[PriorSource, ...] = ()  # what the search started from (model/prior.py)
    schedule: str = ""  # how it hands out its work: refill or batches (scheduling/handouts.py)


def run_row(run: int, info: RunInfo) -> np.ndarray:
    """The ``runs`` row of a run that starts now: running, nothing measured yet."""
    row = np.zeros(1, RUNS_DTYPE)
    row[0] = (
        run,
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
    return row


def rank_rows(
    run: int, hosts: Sequence[str], devices: Sequence[str], pids: Sequence[int], details: Sequence[str] = ()
) -> np.ndarray:
    """The ``ranks`` rows of a run: each rank's host, device (``details``: which exactly) and pid."""
    ranks = np.zeros(len(hosts), RANKS_DTYPE)
    details = list(details) or [""] * len(hosts)
    for rank, (host, device, detail, pid) in enumerate(zip(hosts, devices, details, pids)):
        ranks[rank] = (run, rank, text(host, NAME_TEXT), text(device, NAME_TEXT), text(detail, NAME_TEXT), pid)
    return ranks


def phase_rows(run: int, phases: Iterable[tuple[int, PhaseRow]]) -> np.ndarray:
    """Timeline rows of ``run``: (rank, phase row) pairs."""
    names: dict[str, bytes] = {}  # a handful of phase names, each encoded once

    def name(phase: str) -> bytes:
        return names.get(phase) or names.setdefault(phase, text(phase, SHORT_TEXT))

    return np.array(
        [(run, rank, p.batch, p.config_id, name(p.phase), p.start_s, p.end_s) for rank, p in phases],
        dtype=TIMELINE_DTYPE,
    )


def result_rows(
    dtype: np.dtype,
    tune_params: Sequence[str],
    scored: Sequence[Scored],
    placed: tuple[Sequence[str], Sequence[str]],
    run: int,
) -> np.ndarray:
    """The rows of ``scored`` in the layout ``dtype`` of the file at hand, filled by column
    name: a file of an older schema version lacks the newer columns and keeps its layout.
    ``placed`` holds each rank's host and device, as the run's start recorded them. Filled a
    column at a time: one numpy assignment per column, not one per value."""
    hosts, devices = placed
    rows = np.zeros(len(scored), dtype)
    if not scored:
        return rows
    iterations = dtype["times_ms"].shape[0]
    times = np.full((len(scored), iterations), np.nan)
    for i, r in enumerate(scored):
        kept = r.times_ms[:iterations]
        times[i, : len(kept)] = kept
    status = {s: text(s, SHORT_TEXT) for s in {r.status for r in scored}}
    columns: dict[str, Callable[[], object]] = {
        "config_id": lambda: [r.config_id for r in scored],
        "status": lambda: [status[r.status] for r in scored],
        "time_ms": lambda: [r.time_ms for r in scored],
        "times_ms": lambda: times,
        "compile_s": lambda: [r.compile_s for r in scored],
        "verify_s": lambda: [r.verify_s for r in scored],
        "benchmark_s": lambda: [r.benchmark_s for r in scored],
        "launches": lambda: [len(r.times_ms) for r in scored],
        "raced": lambda: [int(r.raced) for r in scored],
        "throttled": lambda: [text(r.throttled, NAME_TEXT) for r in scored],
        "run": lambda: run,
        "batch": lambda: [r.batch for r in scored],
        "rank": lambda: [r.rank for r in scored],
        "host": lambda: [text(hosts[r.rank], NAME_TEXT) for r in scored],
        "device": lambda: [text(devices[r.rank], NAME_TEXT) for r in scored],
        "started_s": lambda: [r.started_s for r in scored],
        "finished_s": lambda: [r.finished_s for r in scored],
        "error": lambda: [text(r.error, LONG_TEXT) for r in scored],
    }
    for name in tune_params:
        columns[name] = lambda name=name: [_param(r.config[name], dtype[name]) for r in scored]  # type: ignore[misc]
    for name in dtype.names or ():
        rows[name] = columns[name]()
    return rows


def _param(value: object, width: np.dtype) -> object:
    """A parameter's value as its column holds it: text cut to the column's width."""
    return text(value, width) if isinstance(value, str) else value


def objective_values(names: Sequence[str], column: Callable[[str], np.ndarray], ok: np.ndarray) -> np.ndarray:
    """(rows, len(names)) float64: each objective's value per row, from ``column`` (a results
    field, metric or observed value by name; the kernel time is ``time_ms``), NaN where a row
    did not pass (its metrics are NaN already, its time may not be)."""
    values = np.column_stack([np.asarray(column("time_ms" if n == TIME else n), dtype=np.float64) for n in names])
    values[~np.asarray(ok, dtype=bool)] = np.nan
    return values.reshape(len(ok), len(names))


def values_table(names: Sequence[str], by_name: Sequence[Mapping[str, float]]) -> np.ndarray:
    """One row per dict, one column per name; NaN where a dict lacks the name."""
    return np.array([[d.get(n, math.nan) for n in names] for d in by_name], dtype=np.float64).reshape(
        len(by_name), len(names)
    )
