"""``convergence.png``: the best objective value so far, each configuration a point.

It is drawn against wall time, with the runs laid end to end. It is drawn against the
configurations evaluated too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mpitune.offline.analysis import Tables
from mpitune.offline.plots.axes import Axis, needs_log, time_unit, title, walls_by_run, with_objective
from mpitune.offline.ranking import running_best


@dataclass(frozen=True, eq=False)
class Search:
    """The rows in the order they finished.

    It holds each row's wall time, objective and whether it counts, and the running best. It also
    holds where each run starts (s, the runs end to end) and how long they take in all."""

    results: Any  # pandas.DataFrame, with ``objective`` and ``usable``
    wall_s: np.ndarray
    objective: np.ndarray
    ok: np.ndarray
    best: np.ndarray
    run_offsets: dict[int, float]
    total_s: float


def figure(t: Tables, plt: Any) -> Any:
    search, axis = _search(t)
    scale, unit = time_unit(search.total_s or float(np.nanmax(search.wall_s, initial=0)))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    since = "since the run started" if len(search.run_offsets) < 2 else "of the runs, end to end"
    evals = np.arange(1, len(search.results) + 1)
    _draw(axes[0], search, search.wall_s / scale, axis)
    _draw(axes[1], search, evals, axis)
    _mark_runs(axes[0], [offset / scale for offset in sorted(search.run_offsets.values())][1:])
    runs = search.results["run"].to_numpy()
    _mark_runs(axes[1], [float(np.searchsorted(runs, r)) + 0.5 for r in sorted(search.run_offsets)[1:]])
    axes[0].set_xlabel(f"wall time {since} ({unit})")
    axes[1].set_xlabel("configurations evaluated (in the order they finished)")
    if needs_log(search.objective[search.ok]):
        axes[0].set_yscale("log")
    axes[0].set_ylabel(f"{axis.label}, {axis.direction}")
    axes[0].set_xlim(left=0)
    axes[1].set_xlim(left=0)
    axes[1].legend(loc="lower right" if axis.goal.higher_is_better else "upper right")
    failed = int((~search.ok).sum())
    note = f"; {failed} failed configuration(s) not drawn" if failed else ""
    fig.suptitle(f"Convergence of the search: {title(t)}, {len(search.results)} configurations{note}")
    fig.tight_layout()
    return fig


def _search(t: Tables) -> tuple[Search, Axis]:
    res, axis = with_objective(t)
    res = res.sort_values(["run", "finished_s", "config_id"], kind="stable").reset_index(drop=True)
    walls = walls_by_run(t)
    offsets, acc = {}, 0.0
    for run in sorted(walls):
        offsets[run], acc = acc, acc + walls[run]
    wall = res["finished_s"].to_numpy(float) + res["run"].map(offsets).to_numpy(float)
    ok = res["usable"].to_numpy()
    values = res["objective"].to_numpy(float)
    best = running_best(values, ok, axis.goal.higher_is_better)
    return Search(res, wall, values, ok, best, offsets, acc), axis


def _draw(ax: Any, s: Search, x: np.ndarray, axis: Axis) -> None:
    """Every configuration that counts, the best so far as steps, and the best starred."""
    ok, obj = s.ok, s.objective
    ax.scatter(
        x[ok],
        obj[ok],
        s=14 if ok.sum() < 500 else 8,
        color="#6baed6",
        alpha=0.7,
        lw=0,
        label="each configuration",
        rasterized=True,
    )
    has_best = np.isfinite(s.best)
    if has_best.any():
        ax.step(x[has_best], s.best[has_best], where="post", color="#08519c", lw=2, label="best so far")
        i = int(np.flatnonzero(ok & (obj == s.best[-1]))[0])
        ax.plot(
            [x[i]], [obj[i]], marker="*", ms=14, color="#e6550d", ls="none", label=f"best: {obj[i]:.4g} {axis.unit}"
        )
    ax.grid(alpha=0.3)


def _mark_runs(ax: Any, starts: list[float]) -> None:
    """A dashed line where each run after the first starts."""
    for k, start in enumerate(starts):
        ax.axvline(start, color="0.4", ls="--", lw=1, label="a new run starts" if k == 0 else None)
