"""The objective values of every results row, by one rule for the writer and the reader, so that
the front a run records and the front a reader computes from the same rows are the same."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mpitune.model.objective import TIME


def objective_values(names: Sequence[str], column: Callable[[str], np.ndarray], ok: np.ndarray) -> np.ndarray:
    """(rows, len(names)) float64: each objective's value per row, from ``column`` (a results
    field, metric or observed value by name; the kernel time is ``time_ms``), NaN where a row
    did not pass (its metrics are NaN already, its time may not be)."""
    values = np.column_stack([np.asarray(column("time_ms" if n == TIME else n), dtype=np.float64) for n in names])
    values[~np.asarray(ok, dtype=bool)] = np.nan
    return values.reshape(len(ok), len(names))
