"""The rows the writer appends, and the objective values of the rows.

The writer appends a batch of scored results as rows of the results dataset. It also appends
timeline rows, a run's row and its ranks'. The objective values follow one rule for writer and
reader. So the front a run records is the front a reader computes from the same rows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.model.objective import TIME
from mpitune.model.prior import PriorSource
from mpitune.model.result import Result, Scored, Status
from mpitune.model.schema import NAME_TEXT, RANKS_DTYPE, RUNS_DTYPE, SHORT_TEXT, TIMELINE_DTYPE
from mpitune.model.timeline import PhaseRow
from mpitune.store.layout import fixed_text


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
    """The ``runs`` row of a run that starts now: running, nothing measured yet.

    It is filled by column name; a column named as a field of ``info`` comes from it.
    """
    made: dict[str, Any] = {
        "run": run,
        "wall_s": math.nan,
        "max_fevals": -1 if info.max_fevals is None else info.max_fevals,
        "time_limit_s": math.nan if info.time_limit_s is None else info.time_limit_s,
        "measured": 0,
        "status": "running",
    }
    row = np.zeros(1, RUNS_DTYPE)
    for name in RUNS_DTYPE.names or ():
        row[name] = _as_column([made[name] if name in made else getattr(info, name)], RUNS_DTYPE[name])
    return row


def rank_rows(
    run: int, hosts: Sequence[str], devices: Sequence[str], pids: Sequence[int], details: Sequence[str] = ()
) -> np.ndarray:
    """The ``ranks`` rows of a run: each rank's host, device (``details``: which exactly) and pid."""
    ranks = np.zeros(len(hosts), RANKS_DTYPE)
    details = list(details) or [""] * len(hosts)
    for rank, (host, device, detail, pid) in enumerate(zip(hosts, devices, details, pids)):
        ranks[rank] = (
            run,
            rank,
            fixed_text(host, NAME_TEXT),
            fixed_text(device, NAME_TEXT),
            fixed_text(detail, NAME_TEXT),
            pid,
        )
    return ranks


def phase_rows(run: int, phases: Iterable[tuple[int, PhaseRow]]) -> np.ndarray:
    """Timeline rows of ``run``: (rank, phase row) pairs."""
    names: dict[str, bytes] = {}  # a handful of phase names, each encoded once

    def name(phase: str) -> bytes:
        return names.get(phase) or names.setdefault(phase, fixed_text(phase, SHORT_TEXT))

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
    """The rows of ``scored`` in the layout ``dtype`` of the file at hand, filled by column name.

    A file of an older schema version lacks the newer columns and keeps its layout. A column
    named as a field of the results holds that field, text cut to its width. The others are
    made here. ``placed`` holds each rank's host and device, as the run's start recorded them.
    Each column takes one numpy assignment, not one per value.
    """
    hosts, devices = placed
    rows = np.zeros(len(scored), dtype)
    if not scored:
        return rows
    iterations = dtype["times_ms"].shape[0]
    times = np.full((len(scored), iterations), np.nan)
    for i, r in enumerate(scored):
        kept = r.times_ms[:iterations]
        times[i, : len(kept)] = kept
    made: dict[str, Callable[[], object]] = {
        "times_ms": lambda: times,
        "launches": lambda: [len(r.times_ms) for r in scored],
        "run": lambda: run,
        "host": lambda: [fixed_text(hosts[r.rank], NAME_TEXT) for r in scored],
        "device": lambda: [fixed_text(devices[r.rank], NAME_TEXT) for r in scored],
    }
    for name in tune_params:
        made[name] = lambda name=name: [_param(r.config[name], dtype[name]) for r in scored]  # type: ignore[misc]
    for name in dtype.names or ():
        rows[name] = made[name]() if name in made else _field(scored, name, dtype[name])
    return rows


def _field(scored: Sequence[Scored], name: str, column: np.dtype) -> list[Any]:
    """A field of every result as its column holds it (``_as_column``)."""
    return _as_column([getattr(r, name) for r in scored], column)


def _as_column(values: list[Any], column: np.dtype) -> list[Any]:
    """Values as ``column`` holds them.

    Text, a status too, is encoded once per distinct value and cut to the column's width.
    Anything else stays as it is.
    """
    if column.kind != "S":
        return values
    encoded = {v: fixed_text(v, column) for v in set(values)}
    return [encoded[v] for v in values]


# The fields of a result that say where and when it was measured: they belong to the run that
# measured it, so a row read back leaves them unset (-1, NaN) rather than have this run's ranks
# and clock take them for its own.
_PLACE_AND_TIME = frozenset({"rank", "batch", "started_s", "finished_s"})
_READ_BACK = frozenset(f.name for f in dataclasses.fields(Result)) - _PLACE_AND_TIME - {"observed"}


def rows_as_results(rows: np.ndarray, observed: Sequence[Mapping[str, float]]) -> list[Result]:
    """Results rows read back as ``Result`` records, filled by column name.

    Each column named as a field of ``Result`` sets that field, but for where and when it was
    measured. ``observed`` holds each row's observed values. A file of an older schema version
    lacks the newer columns, whose fields keep their defaults.
    """
    names = [n for n in rows.dtype.names or () if n in _READ_BACK]
    columns = {n: _column(rows[n], n) for n in names}
    return [Result(**{n: columns[n][i] for n in names}, observed=observed[i]) for i in range(len(rows))]


def _column(values: np.ndarray, name: str) -> list[Any]:
    """One column's values as the result's field holds them."""
    if name == "status":
        return [Status(v.decode(errors="replace")) for v in values]
    if name == "times_ms":
        return [tuple(float(t) for t in row if not math.isnan(t)) for row in values]
    if values.dtype.kind == "S":
        return [v.decode(errors="replace") for v in values]
    if name == "raced":
        return [bool(v) for v in values]
    return list(values.tolist())


def _param(value: object, width: np.dtype) -> object:
    """A parameter's value as its column holds it: text cut to the column's width."""
    return fixed_text(value, width) if isinstance(value, str) else value


def objective_values(names: Sequence[str], column: Callable[[str], np.ndarray], ok: np.ndarray) -> np.ndarray:
    """(rows, len(names)) float64: each objective's value per row.

    The one rule for a row's objective values, for writer, reader, report and the HTML page.
    ``column`` gives a results field, metric or observed value by name; the kernel time is
    ``time_ms``. A row that did not pass holds NaN: its metrics are NaN already, its time may
    not be.
    """
    values = np.column_stack([np.asarray(column("time_ms" if n == TIME else n), dtype=np.float64) for n in names])
    values[~np.asarray(ok, dtype=bool)] = np.nan
    return values.reshape(len(ok), len(names))


def values_table(names: Sequence[str], by_name: Sequence[Mapping[str, float]]) -> np.ndarray:
    """One row per dict, one column per name; NaN where a dict lacks the name."""
    return np.array([[d.get(n, math.nan) for n in names] for d in by_name], dtype=np.float64).reshape(
        len(by_name), len(names)
    )
