"""``parameters.png``: the objective against each tunable parameter that varies.

Every configuration is a point, spread sideways. The median and the best per value are marked."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mpitune.offline.analysis import Tables
from mpitune.offline.plots.axes import needs_log, title, with_objective


def _ticks(ax: Any, labels: list[str]) -> None:
    step = max(1, math.ceil(len(labels) / 12))
    ax.set_xticks(range(0, len(labels), step))
    ax.set_xticklabels(
        labels[::step],
        rotation=45 if max(len(s) for s in labels) > 3 or step > 1 else 0,
        ha="right" if step > 1 or max(len(s) for s in labels) > 3 else "center",
    )


def figure(t: Tables, plt: Any, seed: int = 0) -> Any:
    res, axis = with_objective(t)
    names = t.results.attrs["param_names"]
    ok = res[res["usable"]]
    varying = [n for n in names if ok[n].nunique() > 1] if len(ok) else []
    fixed = [n for n in names if n not in varying]
    cols = {0: 1, 1: 1, 2: 2, 3: 3, 4: 2}.get(len(varying), 3 if len(varying) <= 9 else 4)
    rows = max(1, math.ceil(len(varying) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.0, 4.2 * cols), 3.2 * rows + 1.3), sharey=True, squeeze=False)
    rng = np.random.default_rng(seed)
    log = needs_log(ok["objective"]) if len(ok) else False
    for k, name in enumerate(varying):
        ax = axes[k // cols, k % cols]
        values = sorted(ok[name].unique(), key=lambda v: (isinstance(v, str), v))
        position = {v: i for i, v in enumerate(values)}
        x = ok[name].map(position).to_numpy(float)
        ax.scatter(
            x + rng.uniform(-0.25, 0.25, len(x)),
            ok["objective"],
            s=16 if len(x) < 500 else 9 if len(x) < 2000 else 5,
            alpha=min(0.6, max(0.12, 600 / max(len(x), 1))),
            lw=0,
            color="#6baed6",
            rasterized=True,
        )
        grouped = ok.groupby(name)["objective"]
        best, median = grouped.max() if axis.goal.higher_is_better else grouped.min(), grouped.median()
        xs = [position[v] for v in best.index]
        ax.plot(xs, median.to_numpy(), color="black", marker="s", ms=4, lw=1.2, label="median per value")
        ax.plot(xs, best.to_numpy(), color="#e6550d", marker="o", ms=4, lw=1.5, label="best per value")
        _ticks(ax, [str(v) for v in values])
        ax.set_xlabel(name)
        ax.grid(alpha=0.3)
        if log:
            ax.set_yscale("log")
        if k % cols == 0:
            ax.set_ylabel(axis.label)
    for k in range(len(varying), rows * cols):
        axes[k // cols, k % cols].axis("off")
    if not varying:
        axes[0, 0].text(
            0.5,
            0.5,
            "no parameter varies among the configurations that ran",
            ha="center",
            transform=axes[0, 0].transAxes,
        )
    if varying:
        from matplotlib.lines import Line2D

        handles = [
            Line2D([], [], color="#6baed6", marker="o", ls="none", ms=6, label="a configuration (spread sideways)"),
            Line2D([], [], color="black", marker="s", ms=5, label="median per value"),
            Line2D([], [], color="#e6550d", marker="o", ms=5, lw=1.5, label="best per value"),
        ]
        fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False)
    fixed_note = ""
    if fixed and len(ok):
        fixed_note = "\nnot drawn, only one value ran: " + ", ".join(f"{n}={ok[n].iloc[0]}" for n in fixed)
        if len(fixed_note) > 110:
            fixed_note = fixed_note[:107] + "..."
    fig.suptitle(
        f"{axis.title} against each tunable parameter: {title(t)}, {len(ok)} configurations that ran{fixed_note}",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.05 if rows > 1 else 0.08, 1, 1))
    return fig
