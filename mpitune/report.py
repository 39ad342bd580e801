"""Summaries of a cache file, as text for people and as JSON for scripts.

Every time figure comes from the recorded timeline (intervals on one clock per run),
so wall time is measured, never a sum over configurations, and for every rank the busy
and idle time add up to its wall time.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import numpy as np

from .cache import read
from .result import OK
from .timeline import IDLE_PHASES

MEASURING = ("compile", "verify", "benchmark")


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _config(row, names: list[str]) -> dict:
    return {n: _plain(row[n]) for n in names}


def _run_walls(runs: np.ndarray, timeline: np.ndarray) -> list[float]:
    """A run that never finished (killed) has no wall_s; its last recorded phase stands in."""
    walls = []
    for run in runs:
        wall = float(run["wall_s"])
        if math.isnan(wall):
            ends = timeline["end_s"][timeline["run"] == run["run"]]
            wall = float(ends.max()) if len(ends) else 0.0
        walls.append(wall)
    return walls


def per_rank(data: dict) -> list[dict]:
    """Phase totals per rank over all runs. A rank's wall time runs from the start of the
    run's clock to its last recorded phase."""
    timeline, ranks = data["timeline"], data["ranks"]
    totals: dict[int, dict] = defaultdict(lambda: defaultdict(float))
    for run in np.unique(timeline["run"]):
        rows = timeline[timeline["run"] == run]
        for rank in np.unique(rows["rank"]):
            mine = rows[rows["rank"] == rank]
            t = totals[int(rank)]
            t["wall_s"] += float(mine["end_s"].max())
            for phase, start, end in zip(mine["phase"], mine["start_s"], mine["end_s"]):
                t[phase] += float(end - start)
    where = {int(r["rank"]): (r["host"], r["device"]) for r in ranks}  # latest run wins
    out = []
    for rank in sorted(totals):
        t = totals[rank]
        idle = sum(t[p] for p in IDLE_PHASES)
        busy = sum(v for k, v in t.items() if k not in IDLE_PHASES and k != "wall_s")
        host, device = where.get(rank, ("?", "?"))
        out.append({
            "rank": rank, "host": host, "device": device,
            "compile_s": t["compile"], "verify_s": t["verify"], "benchmark_s": t["benchmark"],
            "other_s": busy - sum(t[p] for p in MEASURING), "busy_s": busy, "idle_s": idle,
            "wall_s": t["wall_s"],
        })
    return out


def summarize(data: dict, top: int = 5) -> dict:
    results, names = data["results"], data["param_names"]
    statuses = Counter(results["status"])
    ok = results[results["status"] == OK]
    order = np.argsort(ok["time_ms"], kind="stable")
    best_rows = ok[order[:top]]
    ranks = per_rank(data)
    wall_rank_s = sum(r["wall_s"] for r in ranks)
    measuring_s = sum(r["compile_s"] + r["verify_s"] + r["benchmark_s"] for r in ranks)
    runs = data["runs"]
    summary = {
        "kernel": data["problem"].get("kernel_name"),
        "lang": data["problem"].get("lang"),
        "space_size": int(runs["space_size"][-1]) if len(runs) else None,
        "configs": int(len(np.unique(results["config_id"]))),
        "ok": int(statuses.get(OK, 0)),
        "failed": {k: int(v) for k, v in sorted(statuses.items()) if k != OK},
        "best": None,
        "top": [{"config": _config(r, names), "time_ms": float(r["time_ms"]),
                 "min_ms": float(np.nanmin(r["times_ms"])), "max_ms": float(np.nanmax(r["times_ms"]))}
                for r in best_rows],
        "median_ms": float(np.median(ok["time_ms"])) if len(ok) else None,
        "worst_ms": float(ok["time_ms"].max()) if len(ok) else None,
        "runs": int(len(runs)),
        "ranks": int(runs["ranks"].max()) if len(runs) else 0,
        "wall_s": float(sum(_run_walls(runs, data["timeline"]))),
        "per_rank": ranks,
        "efficiency": measuring_s / wall_rank_s if wall_rank_s > 0 else None,
    }
    if len(best_rows):
        summary["best"] = {"config": _config(best_rows[0], names), "config_id": int(best_rows[0]["config_id"]),
                           "time_ms": float(best_rows[0]["time_ms"])}
    return summary


def render(path: str, as_json: bool = False, top: int = 5) -> str:
    summary = summarize(read(path), top)
    if as_json:
        return json.dumps(summary, indent=2)
    return _text(path, summary)


def _text(path: str, s: dict) -> str:
    lines = [f"{path}: kernel {s['kernel']} ({s['lang']})",
             f"  {s['configs']} of {s['space_size']} configurations recorded in {s['runs']} run(s) "
             f"on up to {s['ranks']} rank(s), {s['wall_s']:.1f} s wall time",
             f"  ok {s['ok']}" + "".join(f", {k} {v}" for k, v in s["failed"].items())]
    if s["best"]:
        b = s["best"]
        lines.append(f"  best {b['time_ms']:.4g} ms; median {s['median_ms']:.4g} ms "
                     f"({s['median_ms'] / b['time_ms']:.2f}x), worst {s['worst_ms']:.4g} ms "
                     f"({s['worst_ms'] / b['time_ms']:.2f}x)")
        lines.append(f"\n  top {len(s['top'])} (median of iterations, [min, max]):")
        for i, t in enumerate(s["top"], 1):
            cfg = ", ".join(f"{k}={v}" for k, v in t["config"].items())
            lines.append(f"  {i:>3}. {t['time_ms']:10.4g} ms  [{t['min_ms']:.4g}, {t['max_ms']:.4g}]  {cfg}")
    lines.append("\n  rank  host / device                      compile_s  verify_s  bench_s  other_s"
                 "   idle_s   wall_s")
    for r in s["per_rank"]:
        where = f"{r['host']} / {r['device']}"[:34]
        lines.append(f"  {r['rank']:>4}  {where:<34} {r['compile_s']:9.2f} {r['verify_s']:9.2f} "
                     f"{r['benchmark_s']:8.2f} {r['other_s']:8.2f} {r['idle_s']:8.2f} {r['wall_s']:8.2f}")
    if s["efficiency"] is not None:
        lines.append(f"\n  efficiency {100 * s['efficiency']:.1f}% (share of the ranks' wall time spent "
                     f"compiling, verifying and benchmarking)")
    return "\n".join(lines)
