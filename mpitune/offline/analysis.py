"""A cache file as pandas tables, for analysis on a laptop or login node (no MPI, no GPU).

    from mpitune.analysis import load
    results, timeline = load("spec.h5")
    print(results[results.status == "ok"].nsmallest(5, "time_ms"))

pandas is an optional dependency: ``pip install pandas``, or ``pip install -e '.[analysis]'`` in a
checkout. The file itself stays readable with nothing but h5py (docs/cache-format.md).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict
from typing import Any, NamedTuple

import numpy as np

from mpitune.errors import UserError
from mpitune.model.schema import ITERATIONS, RESULT_COLUMNS, RUN_COLUMNS, TIMELINE_COLUMNS
from mpitune.offline import confirmation as confirmed
from mpitune.offline.summary import priors
from mpitune.store.reader import CacheData, read

# The results columns before the per-iteration times (status, time_ms) come first in the table, then
# metrics, observed values and statistics of the iterations; the columns after follow.
_SPLIT = next(i for i, c in enumerate(RESULT_COLUMNS) if c.dtype == ITERATIONS)
_LEADING, _TRAILING = RESULT_COLUMNS[:_SPLIT], RESULT_COLUMNS[_SPLIT + 1 :]
_TEXT_COLUMNS = tuple(c.name for c in RESULT_COLUMNS if c.dtype.startswith("S"))


def pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise UserError("this needs pandas: pip install pandas (in a checkout: pip install -e '.[analysis]')") from None
    return pd


class Tables(NamedTuple):
    results: Any  # pandas.DataFrame
    timeline: Any  # pandas.DataFrame


def _iteration_stats(times: np.ndarray) -> dict[str, np.ndarray]:
    counts = np.sum(~np.isnan(times), axis=1)
    stats = {"iterations": counts}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows of failed configs
        stats["min_ms"] = np.nanmin(times, axis=1) if times.shape[1] else np.full(len(times), np.nan)
        stats["mean_ms"] = np.nanmean(times, axis=1) if times.shape[1] else np.full(len(times), np.nan)
        stats["max_ms"] = np.nanmax(times, axis=1) if times.shape[1] else np.full(len(times), np.nan)
        stats["std_ms"] = np.nanstd(times, axis=1) if times.shape[1] else np.full(len(times), np.nan)
    return stats


def frames(data: CacheData) -> Tables:
    """The tables of a file already read with ``mpitune.store.reader.read``."""
    pd = pandas()
    res, names = data.results, data.param_names
    runs = data.runs
    started_unix = dict(zip(runs["run"].tolist(), runs["started_unix"].tolist()))
    times = np.asarray(res["times_ms"], dtype=float).reshape(len(res), -1)
    columns: dict[str, Any] = {"config_id": res["config_id"]}
    for n in names:
        columns[n] = res[n]
    columns.update({c.name: res[c.name] for c in _LEADING})
    for values, value_names in ((data.metrics, data.metric_names), (data.observed, data.observed_names)):
        columns.update({n: values[:, j] for j, n in enumerate(value_names)})  # as a metric's function saw them
    columns.update(_iteration_stats(times))
    columns["times_ms"] = [row[~np.isnan(row)] for row in times]
    columns.update({c.name: res[c.name] for c in _TRAILING})
    results = pd.DataFrame(columns)
    base = results["run"].map(started_unix).astype(float)
    results["started"] = pd.to_datetime(base + results["started_s"], unit="s", utc=True)
    results["finished"] = pd.to_datetime(base + results["finished_s"], unit="s", utc=True)
    for col in _TEXT_COLUMNS:
        results[col] = results[col].astype(str)

    tl = data.timeline
    timeline = pd.DataFrame({c.name: tl[c.name] for c in TIMELINE_COLUMNS})
    timeline["phase"] = timeline["phase"].astype(str)
    timeline["duration_s"] = timeline["end_s"] - timeline["start_s"]
    where = {(int(r["run"]), int(r["rank"])): (str(r["host"]), str(r["device"])) for r in data.ranks}
    keys = list(zip(timeline["run"].tolist(), timeline["rank"].tolist()))
    timeline["host"] = [where.get(k, ("", ""))[0] for k in keys]
    timeline["device"] = [where.get(k, ("", ""))[1] for k in keys]

    confirmation, _, calibration = confirmed.latest(data)
    info = {
        "problem": data.problem.record(),
        "param_names": names,
        "objective": data.objective.record(),
        "metric_names": data.metric_names,
        "observed_names": data.observed_names,
        "runs": _records(runs),
        # The latest confirmation as ``report --json`` has it (None: none), and its device factors.
        "confirmation": asdict(confirmation) if confirmation is not None else None,
        "calibration": [asdict(d) for d in calibration],
        "priors": [asdict(p) for p in priors(data)],  # what each run's search started from
    }
    results.attrs.update(info)
    timeline.attrs.update(info)
    return Tables(results, timeline)


def _records(table: np.ndarray) -> list[dict[str, Any]]:
    """Rows as dicts of plain Python values.

    pandas compares the ``attrs`` of the frames an operation combines,
    as in ``results[results.status == "ok"]``. Plain values compare; a DataFrame would raise."""
    return [{c.name: row[c.name].item() for c in RUN_COLUMNS} for row in table]


def run_table(frame: Any) -> Any:
    """The runs a frame's ``attrs["runs"]`` lists, as a DataFrame with one row per run."""
    return pandas().DataFrame(frame.attrs["runs"], columns=[c.name for c in RUN_COLUMNS])


def load(path: str) -> Tables:
    """A results file as two pandas tables: ``results, timeline = load(path)``.

    Args:
        path: an mpitune results file (.h5), also while a run writes it.

    Returns:
        ``Tables(results, timeline)``, described below.

    Raises:
        UserError: the file is missing, damaged or of another kind; the message names it.

    ``results``: one row per measured configuration; the tunable parameters as columns, then
    ``status``, ``time_ms`` (Kernel Tuner's "time"), a column per metric and per observed value
    (by its name: ``results["GFLOP/s"]``; NaN unless ``ok``), per-iteration statistics (``iterations``,
    ``min_ms``, ``mean_ms``, ``max_ms``, ``std_ms``, and ``times_ms`` as an array), seconds in
    ``compile_s``/``verify_s``/``benchmark_s``, who measured it (``run``, ``batch``, ``rank``,
    ``host``, ``device``), when (``started_s``/``finished_s`` on the run's clock and
    ``started``/``finished`` as UTC timestamps) and ``error``.

    ``timeline``: one row per phase of a rank (``run``, ``rank``, ``batch``, ``config_id``,
    ``phase``, ``start_s``, ``end_s``, ``duration_s``, ``host``, ``device``).

    Both carry ``.attrs["problem"]``, ``.attrs["param_names"]``, ``.attrs["objective"]``
    (``{"objective": name, "higher_is_better": bool, "metrics": {name: definition}}``),
    ``.attrs["metric_names"]``, ``.attrs["observed_names"]``, ``.attrs["runs"]`` (one dict per
    run; ``pandas.DataFrame(results.attrs["runs"])`` or ``run_table(results)`` makes it a table)
    and ``.attrs["priors"]`` (one dict per prior a run started from, as ``report --json`` has them).
    """
    pandas()  # fail before reading a large file
    return frames(read(path))
