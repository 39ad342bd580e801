"""A cache file in the formats of Kernel Tuner's ecosystem (the other way is kt_import.py).

- ``export_kt_json``: a Kernel Tuner JSON cache, which Kernel Tuner's simulation mode replays
  (``tune_kernel(..., cache=FILE, simulation_mode=True)``).
- ``export_t4``: T4 results (the auto-tuning community's results schema, version 1.0.0, as
  bundled with Kernel Tuner).

Units: Kernel Tuner's durations are in ms, mpitune's in s; kernel times are ms in both.

The ``time`` written is the file's own. For what mpitune measured, it is the median of ``times``;
Kernel Tuner's own is their mean. For what an import brought, it is Kernel Tuner's mean as it
was. It is not remade, so that Kernel Tuner's replay ranks configurations as the tuner that
measured them did. A mean would be the worse ranking anyway. One slow launch, such as a cold
first one, moves a mean, not a median. ``times`` holds every launch, for a reader who wants the
other.

A Kernel Tuner cache holds a configuration as one flat object, under its values joined with
commas. The parameters sit beside Kernel Tuner's own keys. A spec cannot name a parameter as
those keys (model/schema.py). Nor can it give values that make two keys one. A file written
before that rule is refused here in one line. It is never written with one configuration in
place of another.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import numpy as np

from mpitune import __version__
from mpitune.errors import UserError
from mpitune.model.problem import plain
from mpitune.model.result import Status
from mpitune.model.schema import KT_ERROR_MARKERS, KT_RESULT_KEYS, KT_STATUS_KEY
from mpitune.offline.outputs import atomic_text
from mpitune.store.files import refuse_inputs
from mpitune.store.reader import CacheData, read

# mpitune status -> Kernel Tuner's error marker, written in place of the time.
KT_MARKERS: dict[str, str] = {Status.COMPILE_ERROR: "CompilationFailedConfig", Status.INVALID: "InvalidConfig"}
KT_RUNTIME_MARKER = "RuntimeFailedConfig"  # launch and runtime errors, timeouts, wrong answers

# mpitune status -> T4 "invalidity".
T4_INVALIDITY: dict[str, str] = {
    Status.OK: "correct",
    Status.COMPILE_ERROR: "compile",
    Status.LAUNCH_ERROR: "runtime",
    Status.RUNTIME_ERROR: "runtime",
    Status.VERIFY_FAILED: "correctness",
    Status.TIMEOUT: "timeout",
    Status.INVALID: "constraints",
}
T4_SCHEMA_VERSION = "1.0.0"


def _measured_rows(data: CacheData) -> list[tuple[np.void, dict[str, float]]]:
    """One row per configuration, with its metrics and observed values by name.

    The row is the first measurement, as a resume never repeats one. Only finite values are kept:
    what a failure lacks."""
    seen: set[int] = set()
    rows = []
    names = data.metric_names + data.observed_names
    values = np.hstack([data.metrics, data.observed])
    for row, row_values in zip(data.results, values):
        if int(row["config_id"]) not in seen:
            seen.add(int(row["config_id"]))
            rows.append((row, {n: float(v) for n, v in zip(names, row_values) if math.isfinite(v)}))
    if not rows:
        raise UserError("the file holds no measured configurations")
    return rows


def _timestamp(data: CacheData, row: np.void) -> str:
    started = data.runs["started_unix"][data.runs["run"] == row["run"]]
    if not len(started) or math.isnan(row["finished_s"]):
        return ""
    unix = float(started[0]) + float(row["finished_s"])
    return str(datetime.fromtimestamp(unix, timezone.utc))  # Kernel Tuner's own format


def _times(row: np.void) -> list[float]:
    return [float(t) for t in np.asarray(row["times_ms"], dtype=float).ravel() if not math.isnan(t)]


def _device_name(data: CacheData) -> str:
    devices = data.problem.devices or sorted({str(d) for d in data.ranks["device"]})
    return devices[0] if len(devices) == 1 else ", ".join(devices)


def kt_key(values: Iterable[Any]) -> str:
    """Kernel Tuner's cache key: the values joined by commas, each as ``str()`` prints it."""
    return ",".join(str(v) for v in values)


def as_written(data: CacheData) -> dict[str, dict[Any, Any]]:
    """Each parameter's values as its ``tune_params`` lists them, by the value a column reads back.

    Kernel Tuner looks a configuration up by ``str()`` of the value its user wrote. So a 2 in
    ``[0.5, 1.0, 2]`` must stay ``"2"``, not become the ``"2.0"`` of a float column."""
    return {n: {v: v for v in data.problem.tune_params[n]} for n in data.param_names}


def config_of(row: np.void, written: dict[str, dict[Any, Any]]) -> dict[str, Any]:
    return {n: values.get(plain(row[n]), plain(row[n])) for n, values in written.items()}


def _refuse_unkept(data: CacheData) -> None:
    """Refuse a file whose configurations a Kernel Tuner cache cannot hold as they are.

    A spec refuses such names and values (spec/fields.py). But a file written before it did may
    hold them."""
    names = [*data.param_names, *data.metric_names, *data.observed_names]
    taken = next((n for n in names if n in (*KT_RESULT_KEYS, KT_STATUS_KEY)), None)
    if taken:
        raise UserError(
            f"{taken!r} is the name of a key Kernel Tuner writes in every cache entry, over the value of the file's "
            f"{taken!r}; --format t4 keeps it"
        )
    for name in data.param_names:
        marker = next((v for v in data.problem.tune_params[name] if v in KT_ERROR_MARKERS), None)
        if marker:
            raise UserError(
                f"{name!r} has the value {marker!r}, which Kernel Tuner reads as a failure; --format t4 keeps it"
            )


def kt_document(data: CacheData) -> dict[str, Any]:
    """Every configuration under its own key, or a UserError: never one row in place of another."""
    _refuse_unkept(data)
    names = data.param_names
    problem = data.problem
    written = as_written(data)
    cache: dict[str, dict[str, Any]] = {}
    for row, values in _measured_rows(data):
        config = config_of(row, written)
        key = kt_key(config[n] for n in names)
        if key in cache:
            other = {n: cache[key][n] for n in names}
            raise UserError(
                f"configurations {other} and {config} share Kernel Tuner's cache key {key!r}; --format t4 keeps both"
            )
        status = str(row["status"])
        entry = dict(config)
        if status == Status.OK:
            entry["time"] = float(row["time_ms"])
            entry["times"] = _times(row)
            entry.update(values)  # as Kernel Tuner stores its metrics and observers' values
        else:
            entry["time"] = KT_MARKERS.get(status, KT_RUNTIME_MARKER)
            # Kernel Tuner's markers lump failures together; this key, which it ignores, keeps the status.
            entry[KT_STATUS_KEY] = status
        entry.update(
            {
                "compile_time": 1e3 * float(row["compile_s"]),
                "verification_time": 1e3 * float(row["verify_s"]),
                "benchmark_time": 1e3 * float(row["benchmark_s"]),
                "strategy_time": 0,
                "framework_time": 0,
            }
        )
        stamp = _timestamp(data, row)
        if stamp:
            entry["timestamp"] = stamp
        cache[key] = entry
    return {
        "device_name": _device_name(data),
        "kernel_name": problem.kernel_name,
        "problem_size": list(problem.problem_size),
        "tune_params_keys": list(names),
        "tune_params": {n: list(problem.tune_params[n]) for n in names},
        "objective": data.objective.name,
        "cache": cache,
    }


def write_kt_json(doc: dict[str, Any], path: str) -> None:
    """Laid out as Kernel Tuner writes its caches: the header, then one line per configuration."""
    entries = doc["cache"]
    header = json.dumps({**doc, "cache": {}}, indent="")[:-3]  # drop the closing "}\n}"
    body = ",".join("\n" + json.dumps({key: entry})[1:-1] for key, entry in entries.items())
    with atomic_text(path) as fh:
        fh.write(header + body + "}\n}\n")


def export_kt_json(cache_path: str, out: str) -> int:
    refuse_inputs(out, cache_path)
    doc = kt_document(read(cache_path))
    write_kt_json(doc, out)
    return len(doc["cache"])


def t4_document(data: CacheData) -> dict[str, Any]:
    written = as_written(data)
    results = []
    objective = data.objective.name
    for row, values in _measured_rows(data):
        status = str(row["status"])
        out: dict[str, Any] = {}
        stamp = _timestamp(data, row)
        if stamp:
            out["timestamp"] = stamp
        out["configuration"] = config_of(row, written)
        out["objectives"] = [objective]
        out["times"] = {
            "compilation_time": 1e3 * float(row["compile_s"]),
            "runtimes": _times(row),
            "framework": 0.0,
            "search_algorithm": 0.0,
            "validation": 1e3 * float(row["verify_s"]),
            "benchmark": 1e3 * float(row["benchmark_s"]),
        }
        out["invalidity"] = T4_INVALIDITY.get(status, "runtime")
        out["correctness"] = 0 if status == Status.VERIFY_FAILED else 1
        value = float(row["time_ms"]) if status == Status.OK else KT_MARKERS.get(status, KT_RUNTIME_MARKER)
        out["measurements"] = [{"name": "time", "value": value, "unit": "ms"}] + [
            {"name": n, "value": v, "unit": ""} for n, v in values.items()
        ]
        results.append(out)
    return {
        "schema_version": T4_SCHEMA_VERSION,
        "results": results,
        "metadata": {
            "timeunit": "milliseconds",
            "kernel_name": data.problem.kernel_name,
            "device_name": _device_name(data),
            "generator": f"mpitune {__version__}",
        },
    }


def export_t4(cache_path: str, out: str) -> int:
    refuse_inputs(out, cache_path)
    doc = t4_document(read(cache_path))
    with atomic_text(out) as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    return len(doc["results"])
