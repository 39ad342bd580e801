"""``timeline.png``: a Gantt chart of what every rank did, coloured by phase.

It shows run by run, the last three. The HTML report draws its timeline in the same colours."""

from __future__ import annotations

from typing import Any

from mpitune.model.timeline import PHASES
from mpitune.offline.analysis import Tables
from mpitune.offline.plots.axes import time_unit, title

PHASE_COLORS = {
    "startup": "#8c8c8c",
    "strategy": "#9467bd",
    "compile": "#ff7f0e",
    "verify": "#bcbd22",
    "benchmark": "#2ca02c",
    "calibrate": "#aec7e8",
    "confirm": "#17becf",
    "write": "#8c564b",
    "lost": "#000000",
    "restart": "#e377c2",
    "other": "#c7c7c7",
    "wait": "#d62728",
}
PHASE_LABELS = {
    "startup": "start-up",
    "strategy": "strategy",
    "compile": "compile",
    "verify": "verify",
    "benchmark": "benchmark",
    "calibrate": "timing the reference",
    "confirm": "confirming the best",
    "write": "write file",
    "lost": "hung or crashed configuration",
    "restart": "restarting the worker",
    "other": "other work",
    "wait": "waiting for other ranks",
}


def figure(t: Tables, plt: Any, max_runs: int = 3) -> Any:
    tl = t.timeline
    runs = sorted(int(r) for r in tl["run"].unique())
    shown = runs[-max_runs:]
    ranks_of = {r: sorted(int(k) for k in tl.loc[tl["run"] == r, "rank"].unique()) for r in shown}
    heights = [max(1.6, 0.45 * len(ranks_of[r]) + 0.9) for r in shown] or [2]
    fig, axes = plt.subplots(
        len(shown) or 1, 1, figsize=(12, sum(heights) + 1.3), gridspec_kw={"height_ratios": heights}, squeeze=False
    )
    present = [p for p in PHASES if p in set(tl["phase"])] + sorted(set(tl["phase"]) - set(PHASES))
    for ax, run in zip(axes[:, 0], shown):
        mine = tl[tl["run"] == run]
        end = float(mine["end_s"].max()) if len(mine) else 0.0
        scale, unit = time_unit(end)
        ranks = ranks_of[run]
        total = mine.groupby("phase")["duration_s"].sum()
        rank_total = mine.groupby("rank")["end_s"].max().sum()
        for y, rank in enumerate(ranks):
            rows = mine[mine["rank"] == rank]
            for phase in present:
                p = rows[rows["phase"] == phase]
                if len(p):
                    ax.broken_barh(
                        list(zip(p["start_s"] / scale, p["duration_s"] / scale)),
                        (y - 0.38, 0.76),
                        facecolors=PHASE_COLORS.get(phase, "#17becf"),
                        lw=0,
                    )
        devices = mine.groupby("rank")["device"].first()
        hosts = mine.groupby("rank")["host"].first()
        one_place = len(set(zip(hosts, devices))) == 1
        ax.set_yticks(range(len(ranks)))
        ax.set_yticklabels([f"rank {r}" if one_place else f"rank {r}\n{hosts[r]}: {devices[r]}"[:40] for r in ranks])
        ax.set_ylim(len(ranks) - 0.4, -0.6)
        ax.set_xlim(0, end / scale * 1.005 if end else 1)
        ax.set_xlabel(f"time since run {run} started ({unit})")
        ax.grid(axis="x", alpha=0.3)
        measuring = sum(total.get(p, 0.0) for p in ("compile", "verify", "benchmark"))
        percent = 100 / rank_total if rank_total > 0 else 0.0
        where = f" on {hosts.iloc[0]}: {devices.iloc[0]}" if one_place and len(hosts) else ""
        ax.set_title(
            f"run {run}: {end / scale:.3g} {unit} on {len(ranks)} rank(s){where}; "
            f"{percent * measuring:.0f}% of the ranks' time measuring, "
            f"{percent * total.get('wait', 0.0):.0f}% waiting",
            fontsize=10,
        )
    from matplotlib.patches import Patch

    total = tl.groupby("phase")["duration_s"].sum()
    handles = [Patch(color=PHASE_COLORS.get(p, "#17becf"), label=PHASE_LABELS.get(p, p)) for p in present]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 8), frameon=False, fontsize=9)
    skipped = f" (the last {len(shown)} of {len(runs)} runs)" if len(shown) < len(runs) else ""
    red = " (red: waiting for other ranks)" if "wait" in present else ""
    fig.suptitle(f"What each rank did over time{skipped}: {title(t)}{red}")
    fig.tight_layout(rect=(0, 0.06 if len(shown) > 1 else 0.09, 1, 1))
    return fig
