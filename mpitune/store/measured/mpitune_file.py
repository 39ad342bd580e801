"""An mpitune results file read as measured data, for a replay or a prior.

It reads HDF5 (h5py), which a replay of a Kernel Tuner cache does without: load imports it
only for an mpitune file.

Each configuration's first row is kept, with its observed values and metrics. So are what the
replay's clock charges besides configurations (``RecordedRun``) and the launches timed again.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mpitune.errors import UserError
from mpitune.model.replay_clock import recorded_run, twice_measured
from mpitune.model.result import Status
from mpitune.store.measured.table import MeasuredData, Measurement, Searched
from mpitune.store.reader import read


def read_mpitune_file(path: str) -> MeasuredData:
    """The measured data of the mpitune file at ``path``."""
    data = read(path)
    twice = twice_measured(data.timeline)
    names = data.param_names
    problem = data.problem
    configs, measurements = [], []
    seen = set()
    observed_names = data.observed_names + data.metric_names
    values = np.hstack([data.observed, data.metrics])
    row_configs = [tuple(row[n].item() if hasattr(row[n], "item") else row[n] for n in names) for row in data.results]
    for row, row_values, config in zip(data.results, values, row_configs):
        if config in seen:
            continue
        seen.add(config)
        times = [float(t) for t in row["times_ms"] if not math.isnan(t)]
        configs.append(config)
        measurements.append(
            Measurement(
                status=_status(path, str(row["status"])),
                time_ms=float(row["time_ms"]),
                times_ms=times,
                compile_s=float(row["compile_s"]),
                verify_s=float(row["verify_s"]),
                benchmark_s=float(row["benchmark_s"]),
                error=str(row["error"]),
                observed=dict(zip(observed_names, map(float, row_values))),
                launches=int(row["launches"]),
                raced=bool(row["raced"]),
                twice=int(row["config_id"]) in twice,
            )
        )
    if not configs:
        raise UserError(f"{path}: the file holds no configurations")
    config_of = dict(zip(data.results["config_id"].tolist(), row_configs))
    devices = problem.devices or ("",)
    return MeasuredData(
        source=path,
        kernel_name=problem.kernel_name,
        device_name=devices[0],
        problem_size=list(problem.problem_size),
        tune_params={n: list(problem.tune_params[n]) for n in names},
        configs=configs,
        measurements=measurements,
        observed_names=observed_names,
        recorded=recorded_run(
            data.timeline,
            data.retimed,
            bool(len(data.results) and data.results["raced"].any()),
            dict(zip(reversed(row_configs), reversed(data.results["rank"].tolist()))),  # the first row's
            frozenset(config_of[i] for i in data.confirmed["config_id"].tolist() if i in config_of),
            data.schedule_of(int(data.runs["run"].max())) if len(data.runs) else "",
        ),
        retimed=_retimed(data.retimed, config_of),
        searched=Searched(int(data.runs["space_size"][-1]), str(data.runs["status"][-1])) if len(data.runs) else None,
    )


def _retimed(
    rows: np.ndarray, config_of: dict[int, tuple[Any, ...]]
) -> dict[tuple[int, str, tuple[Any, ...]], list[float]]:
    """The retimed launches by (rank, purpose, configuration), in the order the run made them."""
    out: dict[tuple[int, str, tuple[Any, ...]], list[float]] = {}
    for row in np.sort(rows, order=["run", "batch", "rank", "round"]):
        config = config_of.get(int(row["config_id"]))
        if config is not None:
            out.setdefault((int(row["rank"]), str(row["purpose"]), config), []).append(float(row["time_ms"]))
    return out


def _status(path: str, value: str) -> Status:
    try:
        return Status(value)
    except ValueError:
        raise UserError(f"{path}: unknown status {value!r}; `python -m mpitune check {path}` says more") from None
