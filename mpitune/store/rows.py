"""One batch of scored results as rows of the file's results dataset, and the objective values of
the rows, by one rule for the writer and the reader, so that the front a run records and the
front a reader computes from the same rows are the same."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from mpitune.model.objective import TIME
from mpitune.model.result import Scored
from mpitune.model.schema import LONG_TEXT, NAME_TEXT, SHORT_TEXT
from mpitune.store.layout import text


def result_rows(
    dtype: np.dtype,
    tune_params: Sequence[str],
    scored: Sequence[Scored],
    placed: tuple[Sequence[str], Sequence[str]],
    run: int,
) -> np.ndarray:
    """The rows of ``scored`` in the layout ``dtype`` of the file at hand, filled by column
    name: a file of an older schema version lacks the newer columns and keeps its layout.
    ``placed`` holds each rank's host and device, as the run's start recorded them."""
    hosts, devices = placed
    rows = np.zeros(len(scored), dtype)
    iterations = dtype["times_ms"].shape[0]
    for i, r in enumerate(scored):
        times = np.full(iterations, np.nan)
        times[: len(r.times_ms)] = r.times_ms[:iterations]
        params = tuple(
            text(r.config[n], dtype[n]) if isinstance(r.config[n], str) else r.config[n] for n in tune_params
        )
        by_name = dict(
            zip(("config_id", *tune_params), (r.config_id, *params)),
            status=text(r.status, SHORT_TEXT),
            time_ms=r.time_ms,
            times_ms=times,
            compile_s=r.compile_s,
            verify_s=r.verify_s,
            benchmark_s=r.benchmark_s,
            launches=len(r.times_ms),
            raced=int(r.raced),
            throttled=text(r.throttled, NAME_TEXT),
            run=run,
            batch=r.batch,
            rank=r.rank,
            host=text(hosts[r.rank], NAME_TEXT),
            device=text(devices[r.rank], NAME_TEXT),
            started_s=r.started_s,
            finished_s=r.finished_s,
            error=text(r.error, LONG_TEXT),
        )
        rows[i] = tuple(by_name[name] for name in dtype.names or ())
    return rows


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
