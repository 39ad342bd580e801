"""Summaries of a cache file, as text for people and as JSON for scripts.

Every time figure comes from the recorded timeline (intervals on one clock per run),
so wall time is measured, never a sum over configurations, and for every rank the busy
and idle time add up to its wall time.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from datetime import datetime, timezone

import numpy as np

from mpitune.model.problem import plain
from mpitune.model.result import Status
from mpitune.offline import front
from mpitune.offline.rank_time import PHASE_COLUMNS, gather_waits, per_rank, run_walls, startup
from mpitune.offline.ranking import best_first, objective_column, usable
from mpitune.store.reader import CacheData, read


def _config(row, names: list[str]) -> dict:
    return {n: plain(row[n]) for n in names}


def _devices(ranks: np.ndarray) -> list[dict]:
    """Each (host, device) pair with the ranks that used it, over all runs."""
    found: dict[tuple, set] = defaultdict(set)
    for r in ranks:
        found[(str(r["host"]), str(r["device"]))].add(int(r["rank"]))
    return [{"host": h, "device": d, "ranks": sorted(rs)} for (h, d), rs in sorted(found.items())]


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).isoformat(timespec="seconds")


def _runs(runs: np.ndarray, walls: list[float]) -> list[dict]:
    out = []
    for run, wall in zip(runs, walls):
        out.append(
            {
                "run": int(run["run"]),
                "started": _iso(float(run["started_unix"])),
                "wall_s": wall,
                "finished": not math.isnan(float(run["wall_s"])),
                "status": str(run["status"]),
                "ranks": int(run["ranks"]),
                "strategy": str(run["strategy"]),
                "seed": int(run["seed"]),
                "max_fevals": None if run["max_fevals"] < 0 else int(run["max_fevals"]),
                "time_limit_s": None if math.isnan(run["time_limit_s"]) else float(run["time_limit_s"]),
                "batch_size": int(run["batch_size"]),
                "space_size": int(run["space_size"]),
                "measured": int(run["measured"]),
                "command": str(run["command"]),
                "version": str(run["version"]),
            }
        )
    return out


def _spread(times: np.ndarray) -> dict:
    times = times[~np.isnan(times)]
    if not len(times):
        return {"min_ms": math.nan, "max_ms": math.nan, "std_ms": math.nan, "iterations": 0}
    return {
        "min_ms": float(times.min()),
        "max_ms": float(times.max()),
        "std_ms": float(times.std()),
        "iterations": len(times),
    }


def objective_values(data: CacheData) -> np.ndarray:
    """The value of the file's objective for every results row (NaN where there is none)."""
    column = objective_column(data.objective.name, data.metric_names, data.observed_names)
    return np.asarray(data.column(column), dtype=float)


def _ranked(data: CacheData) -> np.ndarray:
    """Indices of the rows with a usable objective value, best first."""
    values = objective_values(data)
    higher = data.objective.higher_is_better
    return best_first(values, usable(data.results["status"] == Status.OK, values, higher), higher)


def _values(data: CacheData, i: int) -> dict:
    """Metrics and observed values of row ``i`` by name."""
    return {
        "metrics": {n: float(v) for n, v in zip(data.metric_names, data.metrics[i])},
        "observed": {n: float(v) for n, v in zip(data.observed_names, data.observed[i])},
    }


def summarize(data: CacheData, top: int = 5) -> dict:
    results, names = data.results, data.param_names
    problem = data.problem
    statuses = Counter(results["status"])
    ok = results[results["status"] == Status.OK]
    ranked = _ranked(data)
    values = objective_values(data)
    best_rows = results[ranked[:top]]
    ranks = per_rank(data)
    measuring_s = sum(r["compile_s"] + r["verify_s"] + r["benchmark_s"] for r in ranks)
    runs = data.runs
    walls = run_walls(runs["run"], runs["wall_s"], data.timeline["run"], data.timeline["end_s"])
    # Every rank holds its device for the whole run, also when it has measured its last chunk
    # and left (with two batches in flight the fast ranks leave before the last batch is in).
    wall_rank_s = sum(int(n) * wall for n, wall in zip(runs["ranks"], walls))
    tune_params = problem.get("tune_params", {})
    summary = {
        "kernel": problem.get("kernel_name"),
        "lang": problem.get("lang"),
        "space_size": int(runs["space_size"][-1]) if len(runs) else None,
        "configs": len(np.unique(results["config_id"])),
        "ok": int(statuses.get(Status.OK, 0)),
        "failed": {k: int(v) for k, v in sorted(statuses.items()) if k != Status.OK},
        "best": None,
        "objective": {
            "name": data.objective.name,
            "higher_is_better": data.objective.higher_is_better,
            "metrics": data.metric_names,
            "observed": data.observed_names,
            "median": float(np.median(values[ranked])) if len(ranked) else None,
            "worst": float(values[ranked[-1]]) if len(ranked) else None,
        },
        "top": [
            {
                "config": _config(r, names),
                "config_id": int(r["config_id"]),
                "time_ms": float(r["time_ms"]),
                "objective": float(values[i]),
                **_values(data, i),
                **_spread(np.asarray(r["times_ms"], dtype=float).ravel()),
            }
            for i, r in zip(ranked[:top], best_rows)
        ],
        "median_ms": float(np.median(ok["time_ms"])) if len(ok) else None,
        "worst_ms": float(ok["time_ms"].max()) if len(ok) else None,
        "runs": len(runs),
        "ranks": int(runs["ranks"].max()) if len(runs) else 0,
        "wall_s": float(sum(walls)),
        "per_rank": ranks,
        "efficiency": measuring_s / wall_rank_s if wall_rank_s > 0 else None,
        "gather": gather_waits(data),
        "startup": startup(ranks),
        "problem": {
            "kernel": problem.get("kernel_name"),
            "lang": problem.get("lang"),
            "problem_size": problem.get("problem_size"),
            "iterations": problem.get("iterations"),
            "params": {n: len(tune_params.get(n, [])) for n in names},
            "imported_from": problem.get("imported_from"),
        },
        "devices": _devices(data.ranks),
        "run_list": _runs(runs, walls),
        "pareto": front.summary(data),  # None with one objective
    }
    if len(best_rows):
        summary["best"] = {
            "config": _config(best_rows[0], names),
            "config_id": int(best_rows[0]["config_id"]),
            "time_ms": float(best_rows[0]["time_ms"]),
            "objective": float(values[ranked[0]]),
            **_values(data, int(ranked[0])),
        }
    return summary


def render(path: str, as_json: bool = False, top: int = 5) -> str:
    summary = summarize(read(path), top)
    if as_json:
        return json.dumps(summary, indent=2)
    return _text(path, summary)


def _size(size) -> str:
    if isinstance(size, (list, tuple)):
        return " x ".join(str(s) for s in size) if size else "-"
    return str(size)


def _rank_ranges(ranks: list[int]) -> str:
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


def _seconds(s: float) -> str:
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _text(path: str, s: dict) -> str:
    p = s["problem"]
    params = ", ".join(f"{n} {k}" for n, k in p["params"].items())
    lines = [f"{path}: kernel {s['kernel']} ({s['lang'] or '-'}), problem size {_size(p['problem_size'])}"]
    if p.get("imported_from"):
        lines.append(f"  imported from {p['imported_from']}")
    lines.append(
        f"  space: {s['space_size']} configurations of {len(p['params'])} parameters "
        f"(values: {params}); {p['iterations']} timed iterations each"
    )
    lines.append(
        "  devices: " + "; ".join(f"{d['host']}: {d['device']} ({_rank_ranges(d['ranks'])})" for d in s["devices"])
    )
    if len(s["devices"]) > 1 and any(r["device_detail"] for r in s["per_rank"]):  # which node and GPU each rank had
        lines.append(
            "  placement: " + "; ".join(f"rank {r['rank']} {r['host']} ({r['device_detail']})" for r in s["per_rank"])
        )
    lines.append(f"\n  {s['runs']} run(s), {_seconds(s['wall_s'])} wall time in all:")
    for r in s["run_list"]:
        budget = [f"max_fevals {r['max_fevals']}"] if r["max_fevals"] is not None else []
        budget += [f"time limit {r['time_limit_s']:g} s"] if r["time_limit_s"] is not None else []
        wall = _seconds(r["wall_s"]) + ("" if r["finished"] else " so far")
        started = r["started"].replace("T", " ").replace("+00:00", " UTC")
        lines.append(
            f"  {r['run']:>4}. {started}, {wall}, {r['status']}: {r['measured']} configurations "
            f"measured on {r['ranks']} rank(s) in batches of {r['batch_size']}, "
            f"strategy {r['strategy']} (seed {r['seed']}" + "".join(f", {b}" for b in budget) + ")"
        )
        if r["command"]:
            lines.append(f"        {r['command']}")
    lines.append(
        f"\n  {s['configs']} of {s['space_size']} configurations recorded: ok {s['ok']}"
        + "".join(f", {k} {v}" for k, v in s["failed"].items())
    )
    o = s["objective"]
    if s["best"] and o["name"] == "time":
        b = s["best"]
        lines.append(
            f"  best {b['time_ms']:.4g} ms; median {s['median_ms']:.4g} ms "
            f"({s['median_ms'] / b['time_ms']:.2f}x the best), worst {s['worst_ms']:.4g} ms "
            f"({s['worst_ms'] / b['time_ms']:.2f}x)"
        )
    elif s["best"]:
        b = s["best"]
        lines.append(
            f"  objective {o['name']} ({'higher' if o['higher_is_better'] else 'lower'} is better): "
            f"best {b['objective']:.4g} ({b['time_ms']:.4g} ms); median {o['median']:.4g}, "
            f"worst {o['worst']:.4g}"
        )
    if s["best"]:
        extra = [n for n in o["metrics"] + o["observed"] if n != o["name"]]
        columns = ("objective in ms" if o["name"] == "time" else f"objective {o['name']}, time in ms") + "".join(
            f", {n}" for n in extra
        )
        lines.append(
            f"\n  top {len(s['top'])} ({columns}; spread of the timed iterations: [min, max] and standard deviation):"
        )
        for i, t in enumerate(s["top"], 1):
            cfg = ", ".join(f"{k}={v}" for k, v in t["config"].items())
            spread = f"[{t['min_ms']:.4g}, {t['max_ms']:.4g}] ±{t['std_ms']:.2g}"
            values = {**t["metrics"], **t["observed"]}
            shown = ([] if o["name"] == "time" else [t["objective"]]) + [t["time_ms"]] + [values[n] for n in extra]
            lines.append(f"  {i:>3}. {' '.join(f'{v:10.4g}' for v in shown)}  {spread:<28} {cfg}")
    if s["pareto"]:
        lines += front.text(s["pareto"])
    lines.append("\n  seconds per rank (all runs):")
    lines.append(
        "  rank  host / device                 "
        + "".join(f"{p:>10}" for p in PHASE_COLUMNS)
        + "      wall  configs  eff"
    )
    for r in s["per_rank"]:
        where = f"{r['host']} / {r['device']}"[:30]
        figures = "".join(f"{r['phases'][p]:10.2f}" for p in PHASE_COLUMNS)
        eff = f"{100 * r['efficiency']:3.0f}%" if r["efficiency"] is not None else "   -"
        lines.append(f"  {r['rank']:>4}  {where:<30}{figures}{r['wall_s']:10.2f} {r['configs']:8d} {eff}")
    if s["efficiency"] is not None:
        lines.append(
            f"\n  parallel efficiency {100 * s['efficiency']:.1f}%: the share of the ranks' wall time "
            "spent compiling, verifying and benchmarking;\n  the rest went to start-up, the "
            "strategy, writing the file, hung or crashed configurations, restarting workers, "
            "other work\n  and waiting for other ranks"
        )
    u = s["startup"]
    lines.append(
        f"  start-up: loading the spec (its own code and the checks of what it defines) {u['spec_s']:.2f} s on "
        f"rank 0; mpitune's own start-up {u['mpitune_min_s']:.2f} to {u['mpitune_max_s']:.2f} s per rank"
    )
    g = s["gather"]
    if g["rank_batches"]:
        lines.append(
            f"  at the end of a batch, a rank waited for others in {g['waited']} of {g['rank_batches']} "
            f"cases (more than {100 * g['threshold']:.0f}% of the batch; {g['wait_s']:.1f} s in all)"
        )
    background = sum(r["compile_ahead_s"] for r in s["per_rank"])
    if background:
        lines.append(f"  compiled ahead in the background: {background:.1f} s of compiling beside the ranks' phases")
    return "\n".join(lines)
