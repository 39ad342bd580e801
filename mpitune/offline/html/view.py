"""What every chart of the HTML report starts from.

That is the loader's tables in evaluation order and the objective's values with its goal. It
is also the limits that keep a page of 100,000 configurations responsive. The best is chosen as
``report`` chooses it (offline/ranking.py). It is an ``ok`` row with a finite objective, which
must be positive when higher is better.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mpitune.model.identity import ProblemIdentity
from mpitune.model.objective import TIME, Goal
from mpitune.model.problem import plain
from mpitune.model.result import Status
from mpitune.model.timeline import BACKGROUND_PHASES
from mpitune.offline.analysis import Tables, run_table
from mpitune.offline.rank_time import run_walls
from mpitune.offline.ranking import best_first, running_best, usable_rows
from mpitune.offline.summary import RunPrior
from mpitune.store.rows import objective_values


@dataclass(frozen=True)
class Limits:
    """How much a page draws. Beyond these, charts sample or aggregate and the page says so."""

    points: int = 10_000  # configurations drawn per scatter chart (the best ones always among them)
    svg_points: int = 3_000  # above this a scatter chart is drawn with WebGL (scattergl)
    top: int = 100  # rows of the table of the best configurations
    bars: int = 4_000  # timeline bars; beyond, each rank's time is binned
    bins: int = 40  # histogram bins of the objective's distribution


@dataclass(frozen=True, eq=False)
class Ranking:
    """The file's goal and each results row's objective values; rows without one hold NaN."""

    goal: Goal
    every: np.ndarray  # (rows, objectives): each objective's value
    usable: np.ndarray  # rows that can be ranked: ok, finite, and positive when higher is better

    @property
    def values(self) -> np.ndarray:
        """The first objective's value per row: what the charts rank by."""
        return self.every[:, 0]

    @property
    def label(self) -> str:
        return "kernel time (ms)" if self.goal.name == TIME else self.goal.name

    @property
    def direction(self) -> str:
        return "higher is better" if self.goal.higher_is_better else "lower is better"

    def ranked(self) -> np.ndarray:
        """Indices of the usable rows, best first (stable, as report ranks them)."""
        return best_first(self.values, self.usable, self.goal.higher_is_better)

    def best_so_far(self) -> np.ndarray:
        """The running best in row order; NaN until the first usable row."""
        return running_best(self.values, self.usable, self.goal.higher_is_better)


@dataclass(eq=False)
class View:
    """The file as the charts read it.

    ``results`` is in evaluation order: by run, then by when each configuration finished on its
    run's clock.
    """

    results: Any  # pandas.DataFrame
    timeline: Any  # pandas.DataFrame, background phases (compile workers) left out
    objective: Ranking
    param_names: list[str]
    problem: ProblemIdentity
    runs: Any  # pandas.DataFrame, one row per run
    run_offsets: dict[int, float]  # where each run starts when the runs are laid end to end (s)
    limits: Limits = field(default_factory=Limits)
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


def ranking(results: Any, goal: Goal) -> Ranking:
    """The values of ``goal``'s objectives, each read from its column of ``results``."""
    ok = results["status"].to_numpy() == Status.OK
    every = objective_values(goal.names, lambda n: results[n].to_numpy(float), ok)
    return Ranking(goal, every, usable_rows(ok, every[:, 0], goal.higher_is_better))


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
        objective=ranking(results, Goal.from_record(attrs["objective"])),
        param_names=list(attrs["param_names"]),
        problem=ProblemIdentity.from_record(attrs["problem"]),
        runs=runs,
        run_offsets=offsets,
        limits=limits or Limits(),
        confirmation=attrs.get("confirmation"),
        priors=[RunPrior(**p) for p in attrs["priors"]],
    )


def sampled_rows(rows: np.ndarray, limit: int, keep: np.ndarray) -> np.ndarray:
    """At most ``limit`` of ``rows`` (sorted), always with those in ``keep``.

    The sample is seeded, so a page drawn twice from the same file looks the same.
    """
    if len(rows) <= limit:
        return rows
    keep = np.intersect1d(keep, rows)[:limit]
    rest = np.setdiff1d(rows, keep)
    drawn = np.random.default_rng(0).choice(rest, size=limit - len(keep), replace=False)
    return np.sort(np.concatenate([keep, drawn]))


def hover_text(v: View, rows: np.ndarray) -> list[str]:
    """What a point says when hovered.

    That is its configuration, objective, status and iterations, and the rank, host and device
    that measured it.
    """
    res = v.results
    cols = {
        n: res[n].to_numpy()[rows]
        for n in [*v.param_names, "status", "iterations", "rank", "host", "device", "run", "time_ms"]
    }
    values = v.objective.values[rows]
    out = []
    for k in range(len(rows)):
        config = ", ".join(f"{n}={plain(cols[n][k])}" for n in v.param_names)
        objective = "" if v.objective.goal.name == TIME else f"{v.objective.goal.name} {values[k]:.4g}, "
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
