"""Measured results from earlier tuning, as one table: Kernel Tuner JSON caches (plain or
gzipped) and mpitune HDF5 files. Used to replay a search without a device and to import.

Kernel Tuner writes its cache incrementally and never closes it when a run dies, so a file
may end in a dangling ``},``; that is repaired. Kernel Tuner's error markers in place of a
time become mpitune statuses. Its durations are in ms; here they are in s, as everywhere in
mpitune except kernel times (ms).

Numbers an entry holds besides the parameters and Kernel Tuner's own bookkeeping (its
metrics such as GFLOP/s, its observers' power or energy) become observed values, as do an
mpitune file's observed values and metrics: a replay can optimise them.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

from mpitune.errors import UserError
from mpitune.model.result import COMPILE_ERROR, INVALID, OK, RUNTIME_ERROR

# Keys of a Kernel Tuner cache entry that are neither parameters nor observed values.
KT_BOOKKEEPING = ("time", "times", "compile_time", "verification_time", "benchmark_time", "strategy_time",
                  "framework_time", "timestamp", "__error__", "mpitune_status")
KT_ERRORS = {"InvalidConfig": INVALID, "CompilationFailedConfig": COMPILE_ERROR,
             "RuntimeFailedConfig": RUNTIME_ERROR}


@dataclass
class Measurement:
    status: str
    time_ms: float = math.nan
    times_ms: list[float] = field(default_factory=list)
    compile_s: float = 0.0
    verify_s: float = 0.0
    benchmark_s: float = 0.0
    error: str = ""
    observed: dict[str, float] = field(default_factory=dict)


@dataclass
class MeasuredData:
    source: str
    kernel_name: str
    device_name: str
    problem_size: list
    tune_params: dict[str, list]
    configs: list[tuple]  # parameter values, in tune_params order
    measurements: list[Measurement]
    observed_names: list[str] = field(default_factory=list)

    def lookup(self) -> dict[tuple, Measurement]:
        return dict(zip(self.configs, self.measurements))


def load(path: str) -> MeasuredData:
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such file")
    if path.endswith((".h5", ".hdf5")):
        return _from_mpitune(path)
    return _from_kernel_tuner(path)


def read_kt_json(path: str) -> dict:
    """Parse a Kernel Tuner cache, repairing a file its writer never closed."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        stripped = text.rstrip()
        if stripped.endswith(","):
            try:
                return json.loads(stripped[:-1] + "}}")
            except json.JSONDecodeError:
                pass
        raise UserError(f"{path}: not a Kernel Tuner cache (invalid JSON)") from None


def _kt_observed(entry: dict, params: list[str]) -> dict[str, float]:
    return {k: float(v) for k, v in entry.items()
            if k not in params and k not in KT_BOOKKEEPING and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _kt_measurement(entry: dict) -> Measurement:
    ms_to_s = 1e-3
    m = Measurement(status=OK, compile_s=float(entry.get("compile_time", 0) or 0) * ms_to_s,
                    verify_s=float(entry.get("verification_time", 0) or 0) * ms_to_s,
                    benchmark_s=float(entry.get("benchmark_time", 0) or 0) * ms_to_s)
    value = entry.get("time")
    if "__error__" in entry:
        m.status, m.error = RUNTIME_ERROR, str(entry["__error__"])
    elif isinstance(value, str):
        m.status, m.error = KT_ERRORS.get(value, RUNTIME_ERROR), value
    elif value is None or not math.isfinite(float(value)):
        m.status, m.error = RUNTIME_ERROR, f"time is {value!r}"
    else:
        m.time_ms = float(value)
        m.times_ms = [float(t) for t in entry.get("times", [])]
    return m


def _from_kernel_tuner(path: str) -> MeasuredData:
    return from_kt_document(path, read_kt_json(path))


def from_kt_document(path: str, doc: dict) -> MeasuredData:
    """A Kernel Tuner cache already parsed (they are large: parse once, use twice)."""
    if not isinstance(doc, dict) or "tune_params" not in doc or "cache" not in doc:
        raise UserError(f"{path}: not a Kernel Tuner cache (no tune_params or cache)")
    names = doc.get("tune_params_keys") or list(doc["tune_params"])
    tune_params = {n: list(doc["tune_params"][n]) for n in names}
    configs, measurements, observed = [], [], {}
    for entry in doc["cache"].values():
        configs.append(tuple(entry[n] for n in names))
        measurements.append(_kt_measurement(entry))
        measurements[-1].observed = _kt_observed(entry, names)
        observed.update(dict.fromkeys(measurements[-1].observed))
    if not configs:
        raise UserError(f"{path}: the cache holds no configurations")
    size = doc.get("problem_size", [])
    return MeasuredData(source=path, kernel_name=str(doc.get("kernel_name", "")),
                        device_name=str(doc.get("device_name", "")),
                        problem_size=size if isinstance(size, list) else [size],
                        tune_params=tune_params, configs=configs, measurements=measurements,
                        observed_names=list(observed))


def _from_mpitune(path: str) -> MeasuredData:
    from mpitune.store.reader import read  # h5py, which a replay of a Kernel Tuner cache does without

    data = read(path)
    names = data.param_names
    problem = data.problem
    configs, measurements = [], []
    seen = set()
    observed_names = data.observed_names + data.metric_names
    values = np.hstack([data.observed, data.metrics])
    for row, row_values in zip(data.results, values):
        config = tuple(row[n].item() if hasattr(row[n], "item") else row[n] for n in names)
        if config in seen:
            continue
        seen.add(config)
        times = [float(t) for t in row["times_ms"] if not math.isnan(t)]
        configs.append(config)
        measurements.append(Measurement(status=str(row["status"]), time_ms=float(row["time_ms"]), times_ms=times,
                                        compile_s=float(row["compile_s"]), verify_s=float(row["verify_s"]),
                                        benchmark_s=float(row["benchmark_s"]), error=str(row["error"]),
                                        observed=dict(zip(observed_names, map(float, row_values)))))
    if not configs:
        raise UserError(f"{path}: the file holds no configurations")
    devices = problem.get("devices") or [""]
    return MeasuredData(source=path, kernel_name=problem.get("kernel_name", ""), device_name=devices[0],
                        problem_size=problem.get("problem_size", []),
                        tune_params={n: problem["tune_params"][n] for n in names},
                        configs=configs, measurements=measurements, observed_names=observed_names)
