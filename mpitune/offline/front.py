"""The Pareto front of a file with several objectives, for people.

It is the table ``report`` lists (text and JSON) and the figure ``plot`` draws.

Both take the front from ``CacheData.front_rows`` (model/judging/pareto.py over the stored rows).
That is the rule the run used when it recorded its front. So report, plot, the HTML report and
the file agree. The front is listed best first by the first objective, as every "best" of the
file is ranked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.errors import UserError
from mpitune.model.judging.pareto import oriented
from mpitune.model.objective import TIME
from mpitune.model.problem import plain
from mpitune.store.reader import CacheData

TEXT_ROWS = 20  # front members the text lists; the JSON form lists them all
POINTS, FRONT = "#6baed6", "#e6550d"


def ordered_front(data: CacheData) -> np.ndarray:
    """The results rows on the front, best first by the first objective, then the next, then id."""
    rows = data.front_rows()
    points = oriented(data.objective_values()[rows], data.objective.directions)
    keys = (data.results["config_id"][rows], *points.T[::-1])
    return rows[np.lexsort(keys)]


@dataclass(frozen=True)
class Direction:
    name: str
    higher_is_better: bool


@dataclass(frozen=True)
class Member:
    """A configuration on the front, with the value of each objective by name."""

    config_id: int
    config: dict[str, Any]
    objectives: dict[str, float]
    time_ms: float


@dataclass(frozen=True)
class FrontSummary:
    """The ``pareto`` entry of ``report --json``.

    ``recorded_config_ids`` is None while the run has not recorded its front: still going, or
    killed. ``front`` is best first."""

    objectives: list[Direction]
    with_values: int  # configurations with a value for every objective
    recorded_config_ids: list[int] | None
    front: list[Member]


def summary(data: CacheData) -> FrontSummary | None:
    """None for a file of one objective."""
    objective = data.objective
    if not objective.several:
        return None
    values = data.objective_values()
    recorded = data.recorded_front
    return FrontSummary(
        objectives=[Direction(n, d) for n, d in zip(objective.names, objective.directions)],
        with_values=int(np.isfinite(values).all(axis=1).sum()),
        recorded_config_ids=None if recorded is None else sorted(int(i) for i in recorded),
        front=[
            Member(
                config_id=int(data.results["config_id"][i]),
                config={n: plain(data.results[n][i]) for n in data.param_names},
                objectives={n: float(v) for n, v in zip(objective.names, values[i])},
                time_ms=float(data.results["time_ms"][i]),
            )
            for i in ordered_front(data)
        ],
    )


def _named(name: str, higher_is_better: bool) -> str:
    return f"{name}{' in ms' if name == TIME else ''} ({'higher' if higher_is_better else 'lower'} is better)"


def front_lines(p: FrontSummary) -> list[str]:
    """The report's lines for the front."""
    names = [o.name for o in p.objectives]
    described = [_named(o.name, o.higher_is_better) for o in p.objectives]
    lines = [
        f"\n  Pareto front of {', '.join(described[:-1])} and {described[-1]}: {len(p.front)} of the "
        f"{p.with_values} configurations with values (no other is as good in every objective and better in one)"
        + ("" if p.recorded_config_ids is not None else " (computed; the run has not recorded it yet)")
    ]
    lines.append("       " + "".join(f"{n[:10]:>11}" for n in names) + "  configuration")
    for i, member in enumerate(p.front[:TEXT_ROWS], 1):
        cfg = ", ".join(f"{k}={v}" for k, v in member.config.items())
        lines.append(f"  {i:>4}. " + "".join(f"{member.objectives[n]:11.4g}" for n in names) + f"  {cfg}")
    if len(p.front) > TEXT_ROWS:
        lines.append(f"        ... and {len(p.front) - TEXT_ROWS} more (report --json lists them all)")
    return lines


def figure(data: CacheData, plt: Any) -> Any:
    """Objective 1 against objective 2.

    Every configuration with values is a point. The front is highlighted, and joined as the
    boundary of what it dominates."""
    objective = data.objective
    if not objective.several:
        raise UserError("the pareto plot needs a file of several objectives; this one records one")
    values = data.objective_values()[:, :2]
    drawn = np.isfinite(values).all(axis=1)
    rows = data.front_rows()
    rows = rows[np.argsort(values[rows, 0], kind="stable")]
    fig, ax = plt.subplots(figsize=(8, 5.6))
    ax.scatter(*values[drawn].T, s=14, color=POINTS, alpha=0.6, label=f"{int(drawn.sum())} configurations")
    if len(rows):
        # The boundary of the dominated region: steps towards the better end of objective 1.
        steps = "steps-pre" if objective.directions[0] else "steps-post"
        ax.plot(*values[rows].T, color=FRONT, lw=1.2, drawstyle=steps if len(objective.names) == 2 else "default")
        ax.scatter(*values[rows].T, s=40, color=FRONT, zorder=3, label=f"Pareto front: {len(rows)}")
    for axis, j in ((ax.xaxis, 0), (ax.yaxis, 1)):
        axis.set_label_text(_named(objective.names[j], objective.directions[j]))
        column = values[drawn, j]
        if len(column) > 1 and column.min() > 0 and column.max() / column.min() > 20:
            (ax.set_xscale if j == 0 else ax.set_yscale)("log")
    ax.grid(alpha=0.3)
    ax.legend()
    more = f"; {len(objective.names) - 2} more objective(s) not drawn" if len(objective.names) > 2 else ""
    kernel = data.problem.kernel_name
    ax.set_title(f"{objective.names[0]} against {objective.names[1]}: {kernel}{more}", fontsize=11)
    fig.tight_layout()
    return fig
