"""``distribution.png``: a histogram of the objective over the configurations that ran.

The best, the median and the worst are marked."""

from __future__ import annotations

from typing import Any

import numpy as np

from mpitune.offline.analysis import Tables
from mpitune.offline.plots.axes import needs_log, title, with_objective


def figure(t: Tables, plt: Any) -> Any:
    res, axis = with_objective(t)
    ok = res.loc[res["usable"], "objective"].to_numpy(float)
    fig, ax = plt.subplots(figsize=(8, 4.6))
    failed = res.loc[~res["usable"], "status"].value_counts()
    if len(ok):
        log = needs_log(ok)
        bins = np.geomspace(ok.min(), ok.max(), 40) if log else 40
        ax.hist(ok, bins=bins, color="#6baed6", edgecolor="white", lw=0.5, label="configurations")
        if log:
            ax.set_xscale("log")
        best, median, worst = axis.best(ok), float(np.median(ok)), axis.worst(ok)
        ax.axvline(best, color="#e6550d", lw=2, label=f"best: {best:.4g} {axis.unit}")
        ax.axvline(
            median,
            color="black",
            ls="--",
            lw=1.5,
            label=f"median: {median:.4g} {axis.unit} ({median / best:.2f}x best)",
        )
        ax.axvline(worst, color="0.5", ls=":", lw=1.5, label=f"worst: {worst:.4g} {axis.unit} ({worst / best:.2f}x)")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no configuration ran successfully", ha="center", transform=ax.transAxes)
    ax.set_xlabel(f"{axis.label}{', log scale' if len(ok) and needs_log(ok) else ''}")
    ax.set_ylabel("number of configurations")
    ax.grid(alpha=0.3)
    note = ("; not drawn: " + ", ".join(f"{n} {s}" for s, n in failed.items())) if len(failed) else ""
    ax.set_title(f"{axis.title} over the {len(ok)} configurations that ran\n{title(t)}{note}", fontsize=11)
    fig.tight_layout()
    return fig
