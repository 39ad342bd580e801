"""The report's charts as plotly figures, from a ``View``.

Every chart is built here in Python and travels to the page as plotly JSON. So the static
file and the live page draw the same thing. Charts stay small whatever the file holds. A
scatter chart draws at most ``Limits.points`` configurations, the best always among them. The
distribution, each parameter's effect and the failures are aggregated before the browser.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mpitune.model.result import Status
from mpitune.offline.html.view import View, hover_text, sampled_rows, wide

POINTS = "#6baed6"
BEST = "#e6550d"
RUN_COLORS = ("#08519c", "#31a354", "#756bb1", "#e6550d", "#636363", "#d6616b")
STATUS_COLORS = {
    Status.COMPILE_ERROR: "#ff7f0e",
    Status.RUNTIME_ERROR: "#d62728",
    Status.VERIFY_FAILED: "#9467bd",
    Status.TIMEOUT: "#8c564b",
    Status.LAUNCH_ERROR: "#e377c2",
    Status.INVALID: "#7f7f7f",
}
LAYOUT = dict(
    template="plotly_white",
    margin=dict(l=60, r=20, t=40, b=50),
    hovermode="closest",
    legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"),
)


@dataclass
class Chart:
    """One chart of the page: where it goes, its plotly figure and a note.

    ``key`` is its element's id. The note says what it shows when it shows less than everything.
    """

    key: str
    title: str
    figure: dict[str, Any]
    note: str = ""


def _scatter(v: View) -> Any:
    """The scatter trace type: SVG while it stays fast, WebGL beyond."""
    return go.Scattergl if v.objective.usable.sum() > v.limits.svg_points else go.Scatter


def _points(v: View) -> tuple[np.ndarray, str]:
    """The usable rows drawn as points, and a note when they are a sample."""
    usable = np.flatnonzero(v.objective.usable)
    best = v.objective.ranked()[: v.limits.top]
    rows = sampled_rows(usable, v.limits.points, best)
    note = (
        ""
        if len(rows) == len(usable)
        else (
            f"{len(rows):,} of {len(usable):,} configurations drawn as points (a random sample and the "
            f"{min(len(best), len(rows)):,} best); the best-so-far lines use them all."
        )
    )
    return rows, note


def _best_steps(v: View, x: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The best-so-far line over ``rows``, a contiguous run of results, drawn as steps.

    It holds its value where it changes and at the end.
    """
    best = v.objective.best_so_far()[rows]
    known = np.isfinite(best)
    if not known.any():
        return np.array([]), np.array([])
    changes = np.flatnonzero(known & np.r_[True, best[1:] != best[:-1]])
    keep = np.unique(np.r_[changes, len(rows) - 1])
    return x[rows][keep], best[keep]


def convergence(v: View) -> Chart:
    res, obj = v.results, v.objective
    evals = np.arange(1, len(res) + 1, dtype=float)
    since = "of the runs, end to end" if v.multi_run else "since the run started"
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=(f"against wall time {since} (s)", "against configurations evaluated"),
    )
    rows, note = _points(v)
    text = hover_text(v, rows)
    scatter = _scatter(v)
    for col, x in ((1, v.wall_s), (2, evals)):
        fig.add_trace(
            scatter(
                x=x[rows],
                y=obj.values[rows],
                mode="markers",
                name="each configuration",
                marker=dict(color=POINTS, size=6, opacity=0.7),
                text=text,
                hovertemplate="%{text}<extra></extra>",
                legendgroup="points",
                showlegend=col == 1,
                meta="points",
            ),
            1,
            col,
        )
        _add_runs(fig, v, x, col)
        _add_best(fig, v, x, col)
    fig.update_layout(**LAYOUT, height=450)
    fig.update_layout(margin=dict(t=70), legend=dict(y=1.12))
    fig.update_xaxes(title_text="s", row=1, col=1)
    fig.update_xaxes(title_text="configurations", row=1, col=2)
    fig.update_yaxes(title_text=f"{obj.label} ({obj.direction})", row=1, col=1)
    if wide(obj.values[obj.usable]):
        fig.update_yaxes(type="log")
    return Chart("convergence", "Convergence: the best so far", fig.to_plotly_json(), note)


def _add_runs(fig: go.Figure, v: View, x: np.ndarray, col: int) -> None:
    """Each run's best-so-far line, in its colour, and a dashed line where a later run starts."""
    run_of = v.results["run"].to_numpy()
    strategy = dict(zip(v.runs["run"].tolist(), v.runs["strategy"].astype(str).tolist()))
    for k, run in enumerate(sorted(v.run_offsets)):
        mine = np.flatnonzero(run_of == run)
        bx, by = _best_steps(v, x, mine)
        if len(mine) and len(bx):
            color = RUN_COLORS[k % len(RUN_COLORS)]
            fig.add_trace(
                go.Scatter(
                    x=bx,
                    y=by,
                    mode="lines",
                    line=dict(color=color, width=2, shape="hv"),
                    name=f"best so far, run {run} ({strategy.get(run, '?')})",
                    legendgroup=f"run{run}",
                    showlegend=col == 1,
                    hovertemplate=f"best so far %{{y:.4g}}<extra>run {run}</extra>",
                ),
                1,
                col,
            )
        if v.multi_run and k > 0 and len(mine):
            start = v.run_offsets[run] if col == 1 else float(mine[0]) + 0.5
            fig.add_vline(x=start, line=dict(color="#666", dash="dash", width=1), row=1, col=col)


def _add_best(fig: go.Figure, v: View, x: np.ndarray, col: int) -> None:
    """The best configuration, starred."""
    obj = v.objective
    i = obj.ranked()[:1]
    if not len(i):
        return
    fig.add_trace(
        go.Scatter(
            x=x[i],
            y=obj.values[i],
            mode="markers",
            name=f"best: {obj.values[i][0]:.4g}",
            marker=dict(symbol="star", size=16, color=BEST),
            text=hover_text(v, i),
            hovertemplate="%{text}<extra>best</extra>",
            legendgroup="best",
            showlegend=col == 1,
        ),
        1,
        col,
    )


def distribution(v: View) -> Chart:
    obj = v.objective
    values = obj.values[obj.usable]
    fig = go.Figure()
    log = wide(values)
    if len(values):
        lo, hi = values.min(), values.max()
        edges = (
            (np.geomspace(lo, hi, v.limits.bins + 1) if log else np.linspace(lo, hi, v.limits.bins + 1))
            if hi > lo
            else np.array([lo - 0.5, hi + 0.5])
        )
        counts, edges = np.histogram(values, edges)
        fig.add_trace(
            go.Bar(
                x=(edges[:-1] + edges[1:]) / 2 if not log else np.sqrt(edges[:-1] * edges[1:]),
                y=counts,
                width=np.diff(edges),
                marker_color=POINTS,
                name="configurations",
                customdata=np.c_[edges[:-1], edges[1:]],
                hovertemplate="%{y} configurations in [%{customdata[0]:.4g}, %{customdata[1]:.4g})<extra></extra>",
            )
        )
        best = float(values.max() if obj.goal.higher_is_better else values.min())
        for x, name, color in ((best, "best", BEST), (float(np.median(values)), "median", "#636363")):
            fig.add_vline(x=x, line=dict(color=color, dash="dash"), annotation_text=f"{name} {x:.4g}")
    failed = int((v.results["status"] != Status.OK).sum())
    fig.update_layout(
        **LAYOUT,
        height=360,
        showlegend=False,
        bargap=0.05,
        xaxis=dict(title=f"{obj.label} ({obj.direction})", type="log" if log else "linear"),
        yaxis=dict(title="configurations"),
    )
    note = f"{len(values):,} configurations with a value; {failed:,} failed and are counted under Failures."
    return Chart("distribution", "Distribution of the objective", fig.to_plotly_json(), note)


def _ordered(values: Iterable[Any]) -> list[Any]:
    """A parameter's distinct values in their natural order (numbers by value)."""
    unique = list(dict.fromkeys(values))
    try:
        return sorted(unique)
    except TypeError:
        return sorted(unique, key=str)


def _grid(n: int) -> tuple[int, int]:
    cols = min(3, max(1, n))
    return math.ceil(n / cols), cols


def parameters(v: View) -> Chart:
    """Each parameter's effect: per value, the objective's spread as a box, and the best.

    Quartiles and range are computed here, so the browser gets a few numbers per value.
    """
    obj, names = v.objective, v.param_names
    ok = v.results[obj.usable].assign(_objective=obj.values[obj.usable])
    rows, cols = _grid(len(names))
    fig = make_subplots(
        rows=rows, cols=cols, subplot_titles=names, horizontal_spacing=0.06, vertical_spacing=0.5 / max(rows, 1)
    )
    for k, name in enumerate(names):
        r, c = divmod(k, cols)
        groups = ok.groupby(name)["_objective"]
        order = _ordered(ok[name].tolist())
        stats = groups.describe().reindex(order)
        labels = [str(x) for x in order]
        best = groups.max() if obj.goal.higher_is_better else groups.min()
        fig.add_trace(
            go.Box(
                x=labels,
                q1=stats["25%"],
                median=stats["50%"],
                q3=stats["75%"],
                lowerfence=stats["min"],
                upperfence=stats["max"],
                name=name,
                marker_color=POINTS,
                showlegend=False,
                hoverinfo="y",
            ),
            r + 1,
            c + 1,
        )
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=best.reindex(order),
                mode="markers",
                name="best per value",
                marker=dict(symbol="star", size=11, color=BEST),
                showlegend=k == 0,
                customdata=stats["count"],
                hovertemplate=f"{name}=%{{x}}: best %{{y:.4g}} of %{{customdata}} configurations<extra></extra>",
            ),
            r + 1,
            c + 1,
        )
        fig.update_xaxes(type="category", row=r + 1, col=c + 1)
    if wide(obj.values[obj.usable]):
        fig.update_yaxes(type="log")
    fig.update_layout(**LAYOUT, height=max(320, 290 * rows))
    fig.update_layout(legend=dict(orientation="h", y=1.0 + 0.25 / rows, yanchor="bottom"))
    return Chart(
        "parameters",
        f"Each parameter's effect on {obj.label}",
        fig.to_plotly_json(),
        "Boxes: quartiles and range over the configurations with a value; stars: the best per value.",
    )


def failures(v: View) -> Chart:
    """Counts by status, then per parameter value how many configurations failed and how."""
    res, names = v.results, v.param_names
    statuses = res["status"].value_counts()
    failed_statuses = [s for s in statuses.index if s != Status.OK]
    names = names if failed_statuses else []  # nothing failed: the counts by status say it all
    rows, cols = _grid(len(names) + 1)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=["by status", *[f"by {n}" for n in names]],
        horizontal_spacing=0.06,
        vertical_spacing=0.5 / max(rows, 1),
    )
    order = [Status.OK, *failed_statuses] if Status.OK in statuses.index else failed_statuses
    fig.add_trace(
        go.Bar(
            x=order,
            y=[int(statuses[s]) for s in order],
            showlegend=False,
            marker_color=["#2ca02c" if s == Status.OK else STATUS_COLORS.get(s, "#d62728") for s in order],
            hovertemplate="%{x}: %{y} configurations<extra></extra>",
        ),
        1,
        1,
    )
    failed = res[res["status"] != Status.OK]
    for k, name in enumerate(names, start=1):
        r, c = divmod(k, cols)
        values = _ordered(res[name].tolist())
        totals = res.groupby(name).size().reindex(values, fill_value=0)
        for status in failed_statuses:
            counts = failed[failed["status"] == status].groupby(name).size().reindex(values, fill_value=0)
            share = np.where(totals.to_numpy() > 0, counts.to_numpy() / np.maximum(totals.to_numpy(), 1), 0.0)
            fig.add_trace(
                go.Bar(
                    x=[str(x) for x in values],
                    y=counts,
                    name=status,
                    legendgroup=status,
                    marker_color=STATUS_COLORS.get(status, "#d62728"),
                    showlegend=k == 1,
                    customdata=np.c_[totals.to_numpy(), share * 100],
                    hovertemplate=f"{name}=%{{x}}: %{{y}} of %{{customdata[0]}} {status} "
                    "(%{customdata[1]:.0f}%)<extra></extra>",
                ),
                r + 1,
                c + 1,
            )
        fig.update_xaxes(type="category", row=r + 1, col=c + 1)
    fig.update_layout(**LAYOUT, height=max(320, 290 * rows), barmode="stack")
    fig.update_layout(legend=dict(orientation="h", y=1.0 + 0.25 / rows, yanchor="bottom"))
    note = (
        f"{len(failed):,} of {len(res):,} configurations failed."
        if len(failed)
        else f"None of the {len(res):,} configurations failed."
    )
    return Chart("failures", "Failures", fig.to_plotly_json(), note)
