"""What every plot draws from: the objective with its unit and direction, and the scales."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.model.identity import ProblemIdentity
from mpitune.model.objective import Goal
from mpitune.model.result import Status
from mpitune.offline.analysis import Tables, run_table
from mpitune.offline.rank_time import run_walls
from mpitune.offline.ranking import TIME_COLUMN, objective_column, usable_rows


@dataclass(frozen=True)
class Axis:
    """How the objective is drawn.

    That is its name on the axes and in titles and the unit beside values. Its direction is the
    file's goal's.
    """

    name: str  # "kernel time", "GFLOP/s"
    unit: str  # written after a value: "µs", "GFLOP/s"
    goal: Goal

    @property
    def label(self) -> str:
        """For an axis: "kernel time (µs)", "GFLOP/s"."""
        return f"{self.name} ({self.unit})" if self.unit != self.name else self.name

    @property
    def direction(self) -> str:
        return "higher is better" if self.goal.higher_is_better else "lower is better"

    @property
    def title(self) -> str:
        return self.name[:1].upper() + self.name[1:]

    def best(self, values: Any) -> Any:
        """The best of ``values`` (numpy or pandas), by the objective's direction."""
        return values.max() if self.goal.higher_is_better else values.min()

    def worst(self, values: Any) -> Any:
        return values.min() if self.goal.higher_is_better else values.max()


def with_objective(t: Tables) -> tuple[Any, Axis]:
    """Results with the objective in column ``objective``, whether it counts in ``usable``, and how to draw it.

    A kernel time is in the unit that reads best: µs for tiny kernels."""
    res = t.results.copy()
    goal = Goal.from_record(res.attrs["objective"])
    column = objective_column(goal.name, res.attrs["metric_names"], res.attrs["observed_names"])
    values = res[column].to_numpy(float)
    res["usable"] = usable_rows((res["status"] == Status.OK).to_numpy(), values, goal.higher_is_better)
    if column == TIME_COLUMN:
        ok = values[res["usable"].to_numpy()]
        factor, unit = (1e3, "µs") if len(ok) and ok.max() < 0.1 else (1.0, "ms")
        axis = Axis("kernel time", unit, goal)
    else:
        factor = 1.0
        axis = Axis(column, column, goal)
    res["objective"] = values * factor
    return res, axis


def time_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 2 * 3600:
        return 3600.0, "h"
    if seconds >= 180:
        return 60.0, "min"
    return 1.0, "s"


def needs_log(values: Any) -> bool:
    """Whether values span enough to need a log axis."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    return len(values) > 1 and values.max() / values.min() > 20


def walls_by_run(t: Tables) -> dict[int, float]:
    runs, tl = run_table(t.results), t.timeline
    walls = run_walls(
        runs["run"].to_numpy(), runs["wall_s"].to_numpy(float), tl["run"].to_numpy(), tl["end_s"].to_numpy(float)
    )
    return dict(zip(runs["run"].astype(int).tolist(), walls))


def title(t: Tables) -> str:
    return f"kernel {ProblemIdentity.from_record(t.results.attrs['problem']).kernel_name}"
