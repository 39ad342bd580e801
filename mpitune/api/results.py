"""A results file as Kernel Tuner's ``tune_kernel`` returns its results: ``(results, env)``.

``results`` holds one dict per configuration in the order they were measured, as Kernel Tuner
lists them. Each holds the parameters, ``time`` (ms), ``times`` (every timed run, ms) and the
metrics. It holds the observed values under mpitune's names with units and under Kernel
Tuner's, such as ``energy_j`` and ``nvml_energy``. It holds ``compile_time``,
``verification_time`` and ``benchmark_time`` (ms), and ``timestamp``. A failed configuration
has Kernel Tuner's marker as its ``time``, such as ``"CompilationFailedConfig"``, and no times
or metrics. Every entry also has mpitune's ``status``, and a failed one its ``error``.

``env`` describes the device, the problem and where the time of the call's run went. It has
Kernel Tuner's keys (``device_name``, ``best_config``, ``total_compile_time``, ... in ms). It
also has a few of mpitune's: ``ranks``, ``stop_reason`` and ``cache``.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

import numpy as np

from mpitune.model.problem import Problem, plain
from mpitune.model.result import Status
from mpitune.model.timeline import BACKGROUND_PHASES, IDLE_PHASES
from mpitune.offline import confirmation as confirmed
from mpitune.offline.exchange import KT_MARKERS, KT_RUNTIME_MARKER
from mpitune.store.reader import CacheData

# Timeline phases summed into Kernel Tuner's totals; the rest of the busy time is its "framework".
_TOTALS = {
    "compile": "total_compile_time",
    "verify": "total_verification_time",
    "benchmark": "total_benchmark_time",
    "strategy": "total_strategy_time",
}


def kt_results(data: CacheData, problem: Problem) -> list[dict[str, Any]]:
    """One entry per configuration: the first measurement of each.

    A resumed run never measures one again. ``problem`` gives Kernel Tuner's names of the
    observed values.
    """
    aliases = {name: alias for alias, name in problem.kernel.observed_aliases.items()}
    started = dict(zip(data.runs["run"].tolist(), data.runs["started_unix"].tolist()))
    values = np.hstack([data.metrics, data.observed])
    names = data.metric_names + data.observed_names
    seen: set[int] = set()
    out = []
    for row, row_values in zip(data.results, values):
        config_id = int(row["config_id"])
        if config_id in seen:
            continue
        seen.add(config_id)
        entry: dict[str, Any] = {name: plain(row[name]) for name in data.param_names}
        status = str(row["status"])
        if status == Status.OK:
            entry["time"] = float(row["time_ms"])
            entry["times"] = [float(t) for t in np.asarray(row["times_ms"], dtype=float).ravel() if not math.isnan(t)]
            for name, value in zip(names, row_values.tolist()):
                if math.isfinite(value):
                    entry[name] = value
                    if name in aliases:
                        entry[aliases[name]] = value
        else:
            entry["time"] = KT_MARKERS.get(status, KT_RUNTIME_MARKER)
        entry.update(
            {
                "compile_time": 1e3 * float(row["compile_s"]),
                "verification_time": 1e3 * float(row["verify_s"]),
                "benchmark_time": 1e3 * float(row["benchmark_s"]),
            }
        )
        finished = started.get(int(row["run"]), math.nan) + float(row["finished_s"])
        if math.isfinite(finished):
            entry["timestamp"] = str(datetime.fromtimestamp(finished, timezone.utc))
        entry["status"] = status
        if status != Status.OK:
            entry["error"] = str(row["error"])
        out.append(entry)
    return out


def kt_env(data: CacheData, problem: Problem, results: list[dict[str, Any]], cache: str) -> dict[str, Any]:
    """The device and the problem, and the totals of the latest run (the call's) from its timeline.

    Each phase is summed over the ranks, in ms, as Kernel Tuner sums its per-configuration times.
    """
    run = data.runs[-1]
    rows = data.timeline[(data.timeline["run"] == run["run"]) & ~np.isin(data.timeline["phase"], BACKGROUND_PHASES)]
    seconds = rows["end_s"] - rows["start_s"]
    totals = {key: 1e3 * float(seconds[rows["phase"] == phase].sum()) for phase, key in _TOTALS.items()}
    working = ~np.isin(rows["phase"], [*_TOTALS, *IDLE_PHASES])
    env: dict[str, Any] = {
        "device_name": ", ".join(sorted({str(d) for d in data.ranks["device"][data.ranks["run"] == run["run"]]})),
        "kernel_name": problem.kernel.kernel_name,
        "lang": problem.kernel.lang,
        "problem_size": list(problem.kernel.problem_size),
        "iterations": problem.kernel.iterations,
        "compiler_options": list(problem.kernel.compiler_options),
        "block_size_names": list(problem.kernel.block_size_names),
        "objective": problem.aim.goal.name,
        "objective_higher_is_better": problem.aim.goal.higher_is_better,
        **totals,
        "total_framework_time": 1e3 * float(seconds[working].sum()),
        "total_wait_time": 1e3 * float(seconds[np.isin(rows["phase"], IDLE_PHASES)].sum()),
        "overhead_time": 1e3 * float(run["wall_s"]),
        "ranks": int(run["ranks"]),
        "strategy": str(run["strategy"]),
        "stop_reason": str(run["status"]),
        "measured": int(run["measured"]),
        "cache": cache,
    }
    best = _best(results, problem)
    if best is not None:
        env["best_config"] = best
    confirmation, cost, calibration = confirmed.latest(data)
    if confirmation is not None and cost is not None:  # as ``report --json`` has them
        env["confirmation"] = asdict(confirmation)
        env["confirmation_time"] = 1e3 * cost.seconds
        env["calibration"] = [asdict(d) for d in calibration]
    return env


def _best(results: list[dict[str, Any]], problem: Problem) -> dict[str, Any] | None:
    """The passing configuration with the best objective, as Kernel Tuner's ``best_config``."""
    goal = problem.aim.goal
    scored = [
        r
        for r in results
        if r["status"] == Status.OK and isinstance(r.get(goal.name), float) and math.isfinite(r[goal.name])
    ]
    if not scored:
        return None
    pick = max if goal.higher_is_better else min
    return pick(scored, key=lambda r: r[goal.name])
