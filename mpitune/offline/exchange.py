"""Moving results between mpitune and Kernel Tuner's ecosystem.

- ``export_kt_json``: a cache file as a Kernel Tuner JSON cache, which Kernel Tuner's
  simulation mode replays (``tune_kernel(..., cache=FILE, simulation_mode=True)``).
- ``export_t4``: a cache file as T4 results (the auto-tuning community's results schema,
  version 1.0.0, as bundled with Kernel Tuner).
- ``import_kt``: a Kernel Tuner JSON cache (plain, gzipped, or never closed by a killed
  run) as an mpitune HDF5 file, written through ``mpitune.store.cache.Cache`` exactly as a run
  writes it, with ``runs.strategy = "import"``.

Units: Kernel Tuner's durations are in ms, mpitune's in s; kernel times are ms in both.
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from typing import Any

import numpy as np

from mpitune import __version__
from mpitune.errors import UserError
from mpitune.model.problem import plain
from mpitune.model.result import Result, Status
from mpitune.model.searchspace import SearchSpace
from mpitune.model.timeline import PhaseRow
from mpitune.offline.outputs import atomic_text, refuse_inputs
from mpitune.store.cache import Cache, RunInfo
from mpitune.store.measured import from_kt_document, read_kt_json
from mpitune.store.reader import CacheData, read

FORMATS = ("kt-json", "t4")

# mpitune status -> Kernel Tuner's error marker, written in place of the time.
KT_MARKERS: dict[str, str] = {Status.COMPILE_ERROR: "CompilationFailedConfig", Status.INVALID: "InvalidConfig"}
KT_RUNTIME_MARKER = "RuntimeFailedConfig"  # launch and runtime errors, timeouts, wrong answers

# Kernel Tuner's markers lump failures together; an extra key keeps mpitune's status.
STATUS_KEY = "mpitune_status"

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

# A Kernel Tuner cache filled over several sessions shows a gap in its timestamps; a gap
# longer than this starts a new run in the imported file.
SESSION_GAP_S = 1800.0


def _measured_rows(data: CacheData) -> list:
    """One row per configuration (the first measurement, as a resume never repeats one), with
    its metrics and observed values by name (finite ones only: what a failure lacks)."""
    seen, rows = set(), []
    names = data.metric_names + data.observed_names
    values = np.hstack([data.metrics, data.observed])
    for row, row_values in zip(data.results, values):
        if int(row["config_id"]) not in seen:
            seen.add(int(row["config_id"]))
            rows.append((row, {n: float(v) for n, v in zip(names, row_values) if math.isfinite(v)}))
    if not rows:
        raise UserError("the file holds no measured configurations")
    return rows


def _timestamp(data: CacheData, row) -> str:
    started = data.runs["started_unix"][data.runs["run"] == row["run"]]
    if not len(started) or math.isnan(row["finished_s"]):
        return ""
    unix = float(started[0]) + float(row["finished_s"])
    return str(datetime.fromtimestamp(unix, timezone.utc))  # Kernel Tuner's own format


def _times(row) -> list[float]:
    return [float(t) for t in np.asarray(row["times_ms"], dtype=float).ravel() if not math.isnan(t)]


def _device_name(data: CacheData) -> str:
    devices = data.problem.get("devices") or sorted({str(d) for d in data.ranks["device"]})
    return devices[0] if len(devices) == 1 else ", ".join(devices)


def kt_key(values) -> str:
    """Kernel Tuner's cache key: the values joined by commas, each as ``str()`` prints it."""
    return ",".join(str(v) for v in values)


def kt_document(data: CacheData) -> dict:
    names = data.param_names
    problem = data.problem
    cache = {}
    for row, values in _measured_rows(data):
        config = {n: plain(row[n]) for n in names}
        status = str(row["status"])
        entry = dict(config)
        if status == Status.OK:
            entry["time"] = float(row["time_ms"])
            entry["times"] = _times(row)
            entry.update(values)  # as Kernel Tuner stores its metrics and observers' values
        else:
            entry["time"] = KT_MARKERS.get(status, KT_RUNTIME_MARKER)
            entry[STATUS_KEY] = status  # Kernel Tuner ignores it; an import restores it
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
        cache[kt_key(config[n] for n in names)] = entry
    size = problem.get("problem_size", [])
    return {
        "device_name": _device_name(data),
        "kernel_name": problem.get("kernel_name", ""),
        "problem_size": size,
        "tune_params_keys": list(names),
        "tune_params": {n: problem["tune_params"][n] for n in names},
        "objective": data.objective.name,
        "cache": cache,
    }


def write_kt_json(doc: dict, path: str) -> None:
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


def t4_document(data: CacheData) -> dict:
    names = data.param_names
    results = []
    objective = data.objective.name
    for row, values in _measured_rows(data):
        status = str(row["status"])
        out: dict[str, Any] = {}
        stamp = _timestamp(data, row)
        if stamp:
            out["timestamp"] = stamp
        out["configuration"] = {n: plain(row[n]) for n in names}
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
            "kernel_name": data.problem.get("kernel_name", ""),
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


# ---------------------------------------------------------------------------- import


def _unix(stamp) -> float:
    try:
        moment = datetime.fromisoformat(str(stamp))
    except ValueError:
        return math.nan
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _sessions(finished_unix: list[float], durations: list[float]) -> list[list[int]]:
    """Indices of the configurations in measuring order, cut where the timestamps jump."""
    order = sorted(range(len(finished_unix)), key=lambda i: finished_unix[i])
    sessions: list[list[int]] = []
    current: list[int] = []
    last = math.nan
    for i in order:
        start = finished_unix[i] - durations[i]
        if current and start - last > SESSION_GAP_S:
            sessions.append(current)
            current = []
        current.append(i)
        last = finished_unix[i]
    if current:
        sessions.append(current)
    return sessions


def import_kt(kt_path: str, out: str, command: str = "") -> dict:
    """Write a Kernel Tuner cache into a new mpitune file; returns a short summary.

    Kernel Tuner measures one configuration after another on one device, so the file gets
    one rank. Its timeline is rebuilt from what each entry records: the configuration's
    compile, verify and benchmark time ending at its timestamp, and Kernel Tuner's
    strategy time before it; the rest of a gap between two configurations is ``other``.
    Entries without timestamps are laid end to end. Each session (see SESSION_GAP_S)
    becomes a run. Kernel Tuner's metrics and observers' values (GFLOP/s, power, ...) become
    observed values (see mpitune/store/measured.py).
    """
    if kt_path.endswith((".h5", ".hdf5")):
        raise UserError(f"{kt_path}: already an mpitune file; import takes a Kernel Tuner JSON cache")
    if os.path.exists(out):
        raise UserError(f"{out} exists; import writes a new file (remove it or pick another name)")
    doc = read_kt_json(kt_path)
    measured = from_kt_document(kt_path, doc)
    entries = list(doc["cache"].values())
    names = list(measured.tune_params)
    tune_params = measured.tune_params
    space = SearchSpace.from_configs(tune_params, measured.configs)
    position = [{v: i for i, v in enumerate(values)} for values in tune_params.values()]
    ids = {tuple(int(i) for i in row): cid for cid, row in enumerate(space.indices)}
    iterations = max([1] + [len(m.times_ms) for m in measured.measurements])

    ms = 1e-3
    durations = [m.compile_s + m.verify_s + m.benchmark_s for m in measured.measurements]
    strategy = [float(e.get("strategy_time", 0) or 0) * ms for e in entries]
    finished = [_unix(e.get("timestamp")) for e in entries]
    if any(math.isnan(f) for f in finished):  # no timestamps: one after another from 0
        clock, finished = 0.0, []
        for d, st, e in zip(durations, strategy, entries):
            clock += st + d + float(e.get("framework_time", 0) or 0) * ms
            finished.append(clock)
        base = os.path.getmtime(kt_path) - clock
        finished = [base + f for f in finished]

    device = measured.device_name or "unknown device"
    host = "unknown host"  # Kernel Tuner does not record it
    identity = {
        "kernel_name": measured.kernel_name,
        "kernel_source": "",
        "lang": "",
        "arguments": [],
        "problem_size": measured.problem_size,
        "tune_params": tune_params,
        "restrictions": [],
        "iterations": iterations,
        "devices": [device],
        "imported_from": os.path.basename(kt_path),
    }
    if measured.observed_names:
        identity["observed_names"] = measured.observed_names
    cache = Cache(out, identity, tune_params, iterations)
    runs = 0
    try:
        for session in _sessions(finished, durations):
            t0 = min(finished[i] - durations[i] - strategy[i] for i in session)
            cache.start_run(
                RunInfo(
                    started_unix=t0,
                    ranks=1,
                    strategy="import",
                    seed=-1,
                    max_fevals=None,
                    time_limit_s=None,
                    batch_size=1,
                    space_size=len(space),
                    command=command or f"python -m mpitune import {kt_path} --out {out}",
                    version=__version__,
                ),
                [host],
                [device],
                [0],
            )
            results, configs, phases = [], [], []
            last = 0.0
            for batch, i in enumerate(session):
                m, config = measured.measurements[i], measured.configs[i]
                if m.status != Status.OK and entries[i].get(STATUS_KEY) in set(Status):
                    m.status = Status(entries[i][STATUS_KEY])
                end = finished[i] - t0
                start = max(last, end - durations[i])
                # Squeeze the recorded durations into the time the timestamps leave for them.
                scale = (end - start) / durations[i] if durations[i] > 0 else 0.0
                # Before it: Kernel Tuner's strategy time, and whatever else filled the gap.
                strategy_start = max(last, start - strategy[i])
                if strategy_start > last:
                    phases.append((0, PhaseRow(batch, -1, "other", last, strategy_start)))
                if start > strategy_start:
                    phases.append((0, PhaseRow(batch, -1, "strategy", strategy_start, start)))
                cid = ids[tuple(p[v] for p, v in zip(position, config))]
                t = start
                for phase, seconds in (("compile", m.compile_s), ("verify", m.verify_s), ("benchmark", m.benchmark_s)):
                    if seconds > 0:
                        phases.append((0, PhaseRow(batch, cid, phase, t, t + seconds * scale)))
                        t += seconds * scale
                last = max(end, last)
                results.append(
                    Result(
                        config_id=cid,
                        status=m.status,
                        time_ms=m.time_ms,
                        times_ms=tuple(m.times_ms),
                        compile_s=m.compile_s,
                        verify_s=m.verify_s,
                        benchmark_s=m.benchmark_s,
                        error=m.error,
                        observed=m.observed,
                        rank=0,
                        batch=batch,
                        started_s=start,
                        finished_s=end,
                    )
                )
                configs.append(dict(zip(names, config)))
                if len(results) == 2048:
                    cache.append([cache.objective.evaluate(r, c) for r, c in zip(results, configs)], phases)
                    results, configs, phases = [], [], []
            cache.append([cache.objective.evaluate(r, c) for r, c in zip(results, configs)], phases)
            cache.finish_run(last, "finished", len(session))
            runs += 1
    finally:
        cache.close()
    return {
        "configs": len(measured.configs),
        "runs": runs,
        "space_size": len(space),
        "kernel": measured.kernel_name,
        "device": device,
    }
