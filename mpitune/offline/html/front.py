"""The report's Pareto chart, for a file of several objectives: objective 1 against objective 2.

Every configuration with values is a point. The front is highlighted, joined as the boundary of
what it dominates. It is computed by the rule the run records it with: store/rows.py for the
values, model/judging/pareto.py for the front. So page, ``report`` and the file agree."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from mpitune.model.judging.pareto import front_rows
from mpitune.model.objective import TIME
from mpitune.offline.html.charts import BEST, LAYOUT, POINTS, Chart
from mpitune.offline.html.view import View, hover_text, sampled_rows, wide


def several(v: View) -> bool:
    """Whether the file records several objectives, and so the page has a Pareto chart."""
    return v.objective.goal.several


def _title(name: str, higher_is_better: bool) -> str:
    return f"{name}{' (ms)' if name == TIME else ''}, {'higher' if higher_is_better else 'lower'} is better"


def pareto(v: View) -> Chart:
    names, directions, values = v.objective.goal.names, v.objective.goal.directions, v.objective.every
    front = front_rows(values, directions)
    front = front[np.argsort(values[front, 0], kind="stable")]
    drawn = np.flatnonzero(np.isfinite(values[:, :2]).all(axis=1))
    rows = np.setdiff1d(sampled_rows(drawn, v.limits.points, front), front)

    def hovered(at: np.ndarray) -> list[str]:
        extra = [", ".join(f"{n} {values[i, j]:.4g}" for j, n in enumerate(names)) for i in at]
        return [f"{t}<br>{e}" for t, e in zip(hover_text(v, at), extra)]

    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=values[rows, 0],
            y=values[rows, 1],
            mode="markers",
            name="each configuration",
            marker=dict(color=POINTS, size=6, opacity=0.7),
            text=hovered(rows),
            hovertemplate="%{text}<extra></extra>",
            meta="points",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=values[front, 0],
            y=values[front, 1],
            mode="lines+markers",
            name=f"Pareto front: {len(front)}",
            line=dict(color=BEST, width=1.5, shape=("vh" if directions[0] else "hv") if len(names) == 2 else "linear"),
            marker=dict(color=BEST, size=9),
            text=hovered(front),
            hovertemplate="%{text}<extra></extra>",
            meta="front",
        )
    )
    for axis, j in (("xaxis", 0), ("yaxis", 1)):
        scale = "log" if wide(values[drawn, j]) else "-"
        fig.update_layout({axis: dict(title=_title(names[j], directions[j]), type=scale)})
    fig.update_layout(**LAYOUT, height=480)
    shown = len(rows) + len(front)
    note = (
        f"{len(front):,} of {len(drawn):,} configurations with values are on the front: "
        "no other is as good in every objective and better in one."
    )
    if shown < len(drawn):
        note += f" {shown:,} drawn as points (a random sample and the whole front)."
    if len(names) > 2:
        note += f" The front is that of all {len(names)} objectives; {', '.join(names[2:])} not drawn."
    return Chart("pareto", f"Pareto front: {names[0]} against {names[1]}", fig.to_plotly_json(), note)
