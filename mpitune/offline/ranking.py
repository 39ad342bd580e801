"""Which configuration is best, by the objective the file records.

Report, plots and their tables must agree on it. So the lookup of the objective's values and the
ranking are here once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TIME_COLUMN = "time_ms"  # what the objective "time" (Kernel Tuner's name) is in the results


def objective_column(name: str, metric_names: Sequence[str], observed_names: Sequence[str]) -> str:
    """The column holding objective ``name``.

    A metric or observed value is under its own name, in ``CacheData.column`` and the pandas results
    alike. Else it is the kernel time."""
    return name if name in metric_names or name in observed_names else TIME_COLUMN


def usable_rows(ok: np.ndarray, values: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Rows whose objective value counts, as the run's strategy saw them.

    They were measured fine and are finite. For a higher-is-better objective they are positive too
    (see mpitune/model/objective.py)."""
    counts: np.ndarray = ok & np.isfinite(values)
    return counts & (values > 0) if higher_is_better else counts


def best_first(values: np.ndarray, counts: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Indices of the rows that count, best first; ties keep row order."""
    rows = np.flatnonzero(counts)
    return rows[np.argsort(-values[rows] if higher_is_better else values[rows], kind="stable")]


def running_best(values: np.ndarray, counts: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """The best value among the rows so far, in row order; NaN until a row counts."""
    if higher_is_better:
        best = np.maximum.accumulate(np.where(counts, values, -np.inf))
    else:
        best = np.minimum.accumulate(np.where(counts, values, np.inf))
    return np.where(np.isfinite(best), best, np.nan)
