"""A cache file's summary (summary.py) for people, as text, and for scripts, as one JSON object.

The object's keys are the summary's field names."""

from __future__ import annotations

import json

from mpitune.model.problem import Dealing, Schedule
from mpitune.offline import confirmation, front
from mpitune.offline.rank_time import PHASE_COLUMNS
from mpitune.offline.summary import RunSummary, Summary, summarize_rows
from mpitune.store.reader import streamed


def render(path: str, as_json: bool = False, top: int = 5) -> str:
    """The report of the file at ``path``, read a slice of rows at a time.

    Its memory is bounded by a slice, not by the file's size."""
    with streamed(path) as rows:
        summary = summarize_rows(rows, top)
    if as_json:
        return json.dumps(summary.as_json(), indent=2)
    return as_text(path, summary)


def as_text(path: str, s: Summary) -> str:
    """The report's lines, as ``report`` prints them."""
    lines = _problem_lines(path, s) + _run_lines(s) + _result_lines(s) + _top_lines(s)
    lines += confirmation.confirmation_lines(s.confirmation, s.confirmation_cost, s.calibration)
    lines += confirmation.throttled_text(s.throttled)
    if s.pareto:
        lines += front.front_lines(s.pareto)
    return "\n".join(lines + _rank_lines(s) + _overhead_lines(s))


def _problem_lines(path: str, s: Summary) -> list[str]:
    """The problem, its space and where it was measured."""
    p = s.problem
    params = ", ".join(f"{n} {k}" for n, k in p.params.items())
    lines = [f"{path}: kernel {s.kernel} ({s.lang or '-'}), problem size {_size(p.problem_size)}"]
    if p.imported_from:
        lines.append(f"  imported from {p.imported_from}")
    lines.append(
        f"  space: {s.space_size} configurations of {len(p.params)} parameters "
        f"(values: {params}); {p.iterations} timed iterations each"
    )
    lines.append("  devices: " + "; ".join(f"{d.host}: {d.device} ({_rank_ranges(d.ranks)})" for d in s.devices))
    if len(s.devices) > 1 and any(r.device_detail for r in s.per_rank):  # which node and GPU each rank had
        lines.append("  placement: " + "; ".join(f"rank {r.rank} {r.host} ({r.device_detail})" for r in s.per_rank))
    return lines


def _handed_out(r: RunSummary) -> str:
    """How a run handed out its work, as its first line said it (model/problem.py, ``Dealing``)."""
    schedule = Schedule.REFILL if r.schedule == Schedule.REFILL.value else Schedule.BATCHES
    return Dealing.of(schedule, r.ranks, r.batch_size, r.in_turn).describe()


def _run_lines(s: Summary) -> list[str]:
    lines = [f"\n  {s.runs} run(s), {_seconds(s.wall_s)} wall time in all:"]
    for r in s.run_list:
        budget = [f"max_fevals {r.max_fevals}"] if r.max_fevals is not None else []
        budget += [f"time limit {r.time_limit_s:g} s"] if r.time_limit_s is not None else []
        wall = _seconds(r.wall_s) + ("" if r.finished else " so far")
        started = r.started.replace("T", " ").replace("+00:00", " UTC")
        lines.append(
            f"  {r.run:>4}. {started}, {wall}, {r.status}: {r.measured} configurations "
            f"measured on {r.ranks} rank(s), {_handed_out(r)}, "
            f"strategy {r.strategy} (seed {r.seed}" + "".join(f", {b}" for b in budget) + ")"
        )
        if r.command:
            lines.append(f"        {r.command}")
        for p in (p for p in s.prior if p.run == r.run):
            lines.append(f"        prior {p.describe()}")
    return lines


def _result_lines(s: Summary) -> list[str]:
    """What was recorded, and the best against the median and the worst."""
    lines = [
        f"\n  {s.configs} of {s.space_size} configurations recorded: ok {s.ok}"
        + "".join(f", {k} {v}" for k, v in s.failed.items())
    ]
    o, b = s.objective, s.best
    if b and o.goal.name == "time" and s.median_ms is not None and s.worst_ms is not None:
        lines.append(
            f"  best {b.time_ms:.4g} ms; median {s.median_ms:.4g} ms "
            f"({s.median_ms / b.time_ms:.2f}x the best), worst {s.worst_ms:.4g} ms "
            f"({s.worst_ms / b.time_ms:.2f}x)"
        )
    elif b and o.median is not None and o.worst is not None:
        lines.append(
            f"  objective {o.goal.name} ({'higher' if o.goal.higher_is_better else 'lower'} is better): "
            f"best {b.objective:.4g} ({b.time_ms:.4g} ms); median {o.median:.4g}, "
            f"worst {o.worst:.4g}"
        )
    return lines


def _top_lines(s: Summary) -> list[str]:
    """The best configurations: the objective, the time and every other value, then the spread."""
    if not s.best:
        return []
    o = s.objective
    extra = [n for n in o.metrics + o.observed if n != o.goal.name]
    columns = ("objective in ms" if o.goal.name == "time" else f"objective {o.goal.name}, time in ms") + "".join(
        f", {n}" for n in extra
    )
    lines = [f"\n  top {len(s.top)} ({columns}; spread of the timed iterations: [min, max] and standard deviation):"]
    for i, t in enumerate(s.top, 1):
        cfg = ", ".join(f"{k}={v}" for k, v in t.config.items())
        spread = f"[{t.min_ms:.4g}, {t.max_ms:.4g}] ±{t.std_ms:.2g}"
        values = {**t.metrics, **t.observed}
        shown = ([] if o.goal.name == "time" else [t.objective]) + [t.time_ms] + [values[n] for n in extra]
        lines.append(f"  {i:>3}. {' '.join(f'{v:10.4g}' for v in shown)}  {spread:<28} {cfg}")
    return lines


def _rank_lines(s: Summary) -> list[str]:
    """The table of seconds per rank and phase."""
    lines = [
        "\n  seconds per rank (all runs):",
        "  rank  host / device                 "
        + "".join(f"{p:>10}" for p in PHASE_COLUMNS)
        + "      wall  configs  eff",
    ]
    for r in s.per_rank:
        where = f"{r.host} / {r.device}"[:30]
        figures = "".join(f"{r.phases[p]:10.2f}" for p in PHASE_COLUMNS)
        eff = f"{100 * r.efficiency:3.0f}%" if r.efficiency is not None else "   -"
        lines.append(f"  {r.rank:>4}  {where:<30}{figures}{r.wall_s:10.2f} {r.configs:8d} {eff}")
    return lines


def _overhead_lines(s: Summary) -> list[str]:
    """Where the time beside measuring went: efficiency, start-up, waits, compiling ahead."""
    lines = []
    if s.efficiency is not None:
        lines.append(
            f"\n  parallel efficiency {100 * s.efficiency:.1f}%: the share of the ranks' wall time "
            "spent compiling, verifying and benchmarking;\n  the rest went to start-up, the "
            "strategy, writing the file, hung or crashed configurations, restarting workers, "
            "other work\n  and waiting for other ranks"
        )
    u = s.startup
    lines.append(
        f"  start-up: loading the spec (its own code and the checks of what it defines) {u.spec_s:.2f} s on "
        f"rank 0; mpitune's own start-up {u.mpitune_min_s:.2f} to {u.mpitune_max_s:.2f} s per rank"
    )
    g = s.gather
    if g.rank_batches:
        lines.append(
            f"  at the end of a batch, a rank waited for others in {g.waited} of {g.rank_batches} "
            f"cases (more than {100 * g.threshold:.0f}% of the batch; {g.wait_s:.1f} s in all)"
        )
    background = sum(r.compile_ahead_s for r in s.per_rank)
    if background:
        lines.append(f"  compiled ahead in the background: {background:.1f} s of compiling beside the ranks' phases")
    return lines


def _size(size: tuple[object, ...]) -> str:
    return " x ".join(str(s) for s in size) if size else "-"


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
