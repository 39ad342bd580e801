"""What every chart of the HTML report starts from: the loader's tables in evaluation order,
the objective with its direction, and the limits that keep a page of 100,000 configurations
responsive.

The best configuration is chosen exactly as ``report`` chooses it (offline/report.py): an
``ok`` row with a finite objective, which must be positive when higher is better.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mpitune.model.identity import ProblemIdentity
from mpitune.model.problem import plain
from mpitune.model.result import Status
from mpitune.model.timeline import BACKGROUND_PHASES
from mpitune.offline.analysis import Tables, run_table
from mpitune.offline.rank_time import run_walls
from mpitune.offline.summary import RunPrior

TIME = "time"  # the objective's name for the median kernel time (time_ms)


@dataclass(frozen=True)
class Limits:
    """How much a page draws. Beyond these, charts sample or aggregate and the page says so."""

    points: int = 10_000  # configurations drawn per scatter chart (the best ones always among them)
    svg_points: int = 3_000  # above this a scatter chart is drawn with WebGL (scattergl)
    top: int = 100  # rows of the table of the best configurations
    bars: int = 4_000  # timeline bars; beyond, each rank's time is binned
    bins: int = 40  # histogram bins of the objective's distribution


@dataclass(frozen=True, eq=False)
class Objective:
    """The run's objective for every results row (NaN where there is none) and its direction."""

    name: str
    higher_is_better: bool
    values: np.ndarray
    usable: np.ndarray  # rows that can be ranked: ok, finite, and positive when higher is better

    @property
    def label(self) -> str:
        return "kernel time (ms)" if self.name == TIME else self.name

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    def ranked(self) -> np.ndarray:
        """Indices of the usable rows, best first (stable, as report ranks them)."""
        rows = np.flatnonzero(self.usable)
        key = -self.values[rows] if self.higher_is_better else self.values[rows]
        return rows[np.argsort(key, kind="stable")]

    def best_so_far(self) -> np.ndarray:
        """The running best in row order: a running maximum when higher is better; NaN
        until the first usable row."""
        worst = -np.inf if self.higher_is_better else np.inf
        masked = np.where(self.usable, self.values, worst)
        running = np.maximum.accumulate(masked) if self.higher_is_better else np.minimum.accumulate(masked)
        return np.where(np.isfinite(running), running, np.nan)


@dataclass(eq=False)
class View:
    """The file as the charts read it. ``results`` is in evaluation order: by run, then the
    time each configuration finished on its run's clock."""

    results: Any  # pandas.DataFrame
    timeline: Any  # pandas.DataFrame, background phases (compile workers) left out
    objective: Objective
    param_names: list[str]
    problem: ProblemIdentity
    runs: Any  # pandas.DataFrame, one row per run
    run_offsets: dict[int, float]  # where each run starts when the runs are laid end to end (s)
    limits: Limits = field(default_factory=Limits)
    record: dict[str, Any] = field(default_factory=dict)  # the file's objective attribute, all objectives in it
    confirmation: dict[str, Any] | None = None  # the latest confirmation, as report --json has it
    priors: list[RunPrior] = field(default_factory=list)  # what each run's search started from

    @property
    def wall_s(self) -> np.ndarray:
        """Each row's finishing time with the runs laid end to end."""
        wall: np.ndarray = self.results["finished_s"].to_numpy(float, copy=True)
        wall += self.results["run"].map(self.run_offsets).to_numpy(float)
        return wall

    @property
    def multi_run(self) -> bool:
        return len(self.run_offsets) > 1


def objective_of(results: Any, record: dict[str, Any]) -> Objective:
    """The objective ``record`` (``attrs["objective"]``) names, read from its column."""
    name = str(record.get("objective", TIME))
    higher = bool(record.get("higher_is_better", False))
    column = name if name != TIME and name in results.columns else "time_ms"
    values = results[column].to_numpy(float)
    with np.errstate(invalid="ignore"):
        usable = (results["status"].to_numpy() == Status.OK) & np.isfinite(values) & ((values > 0) if higher else True)
    return Objective(name, higher, values, usable)


def view(tables: Tables, limits: Limits | None = None) -> View:
    attrs = tables.results.attrs
    runs = run_table(tables.results)
    results = tables.results.sort_values(["run", "finished_s", "config_id"], kind="stable").reset_index(drop=True)
    timeline = tables.timeline[~tables.timeline["phase"].isin(BACKGROUND_PHASES)].reset_index(drop=True)
    # Kept on the View instead, so that pandas' own concatenations need not compare them.
    results.attrs, timeline.attrs = {}, {}
    offsets, total = {}, 0.0
    walls = run_walls(
        runs["run"].to_numpy(),
        runs["wall_s"].to_numpy(float),
        timeline["run"].to_numpy(),
        timeline["end_s"].to_numpy(float),
    )
    for run, wall in sorted(zip(runs["run"].astype(int).tolist(), walls)):
        offsets[run], total = total, total + wall
    return View(
        results=results,
        timeline=timeline,
        objective=objective_of(results, attrs["objective"]),
        param_names=list(attrs["param_names"]),
        problem=ProblemIdentity.from_record(attrs["problem"]),
        runs=runs,
        run_offsets=offsets,
        limits=limits or Limits(),
        record=dict(attrs["objective"]),
        confirmation=attrs.get("confirmation"),
        priors=[RunPrior(**p) for p in attrs["priors"]],
    )


def sample(rows: np.ndarray, limit: int, keep: np.ndarray) -> np.ndarray:
    """At most ``limit`` of ``rows`` (sorted), always with those in ``keep``; a seeded sample,
    so a page drawn twice from the same file looks the same."""
    if len(rows) <= limit:
        return rows
    keep = np.intersect1d(keep, rows)[:limit]
    rest = np.setdiff1d(rows, keep)
    drawn = np.random.default_rng(0).choice(rest, size=limit - len(keep), replace=False)
    return np.sort(np.concatenate([keep, drawn]))


def hover_text(v: View, rows: np.ndarray) -> list[str]:
    """What a point says when hovered: its configuration, objective, status, iterations and
    the rank, host and device that measured it."""
    res = v.results
    cols = {
        n: res[n].to_numpy()[rows]
        for n in [*v.param_names, "status", "iterations", "rank", "host", "device", "run", "time_ms"]
    }
    values = v.objective.values[rows]
    out = []
    for k in range(len(rows)):
        config = ", ".join(f"{n}={plain(cols[n][k])}" for n in v.param_names)
        objective = "" if v.objective.name == TIME else f"{v.objective.name} {values[k]:.4g}, "
        out.append(
            f"<b>{config}</b><br>{objective}time {cols['time_ms'][k]:.4g} ms<br>"
            f"status {cols['status'][k]}, {int(cols['iterations'][k])} iterations<br>"
            f"rank {int(cols['rank'][k])} on {cols['host'][k]} ({cols['device'][k]}), run {int(cols['run'][k])}"
        )
    return out


def wide(values: np.ndarray) -> bool:
    """Whether positive values span enough (a factor of 20) to need a log axis."""
    values = values[np.isfinite(values) & (values > 0)]
    return len(values) > 1 and values.max() / values.min() > 20
