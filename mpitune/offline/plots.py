"""Pictures of a cache file (matplotlib, Agg backend: no display needed).

    python -m mpitune plot spec.h5 --out plots/

writes ``convergence.png`` (the best objective value so far against wall time and against
evaluations), ``timeline.png`` (a Gantt chart of every rank's phases), ``distribution.png``
(the objective over the measured configurations) and ``parameters.png`` (the objective against
each tunable parameter); and for a file of several objectives ``pareto.png`` (objective 1
against objective 2, the Pareto front highlighted; offline/front.py). The objective is the one the
file records (the first of several), with its direction, ranked as ``report`` ranks it
(mpitune/offline/ranking.py), so plots and report name the same best.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from mpitune.errors import UserError
from mpitune.model.result import Status
from mpitune.model.timeline import PHASES
from mpitune.offline import front
from mpitune.offline.analysis import Tables, frames, run_table
from mpitune.offline.rank_time import run_walls
from mpitune.offline.ranking import TIME_COLUMN, objective_column, running_best, usable
from mpitune.store.reader import read

PLOTS = ("convergence", "timeline", "distribution", "parameters")  # of every file, from its tables
PARETO = "pareto"  # of a file of several objectives (offline/front.py)
CHOICES = (*PLOTS, PARETO)


@dataclass(frozen=True)
class Axis:
    """How the objective is drawn: its name on the axes and in titles, the unit beside values, and
    its direction."""

    name: str  # "kernel time", "GFLOP/s"
    unit: str  # written after a value: "µs", "GFLOP/s"
    higher_is_better: bool

    @property
    def label(self) -> str:
        """For an axis: "kernel time (µs)", "GFLOP/s"."""
        return f"{self.name} ({self.unit})" if self.unit != self.name else self.name

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def title(self) -> str:
        return self.name[:1].upper() + self.name[1:]

    def best(self, values):
        """The best of ``values`` (numpy or pandas), by the objective's direction."""
        return values.max() if self.higher_is_better else values.min()

    def worst(self, values):
        return values.min() if self.higher_is_better else values.max()


def _objective(t: Tables):
    """Results with the objective in column ``objective`` (a kernel time in the unit that reads
    best: µs for tiny kernels) and whether it counts in ``usable``; and how to draw it."""
    res = t.results.copy()
    recorded = res.attrs["objective"]
    higher = bool(recorded["higher_is_better"])
    column = objective_column(recorded["objective"], res.attrs["metric_names"], res.attrs["observed_names"])
    values = res[column].to_numpy(float)
    res["usable"] = usable((res["status"] == Status.OK).to_numpy(), values, higher)
    if column == TIME_COLUMN:
        ok = values[res["usable"].to_numpy()]
        factor, unit = (1e3, "µs") if len(ok) and ok.max() < 0.1 else (1.0, "ms")
        axis = Axis("kernel time", unit, higher)
    else:
        factor = 1.0
        axis = Axis(column, column, higher)
    res["objective"] = values * factor
    return res, axis


PHASE_COLORS = {
    "startup": "#8c8c8c",
    "strategy": "#9467bd",
    "compile": "#ff7f0e",
    "verify": "#bcbd22",
    "benchmark": "#2ca02c",
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
    "write": "write file",
    "lost": "hung or crashed configuration",
    "restart": "restarting the worker",
    "other": "other work",
    "wait": "waiting for other ranks",
}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UserError(
            "plots need matplotlib: pip install matplotlib (in a checkout: pip install -e '.[analysis]')"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 2 * 3600:
        return 3600.0, "h"
    if seconds >= 180:
        return 60.0, "min"
    return 1.0, "s"


def _wide(values) -> bool:
    """Whether values span enough to need a log axis."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    return len(values) > 1 and values.max() / values.min() > 20


def _walls_by_run(t: Tables) -> dict[int, float]:
    runs, tl = run_table(t.results), t.timeline
    walls = run_walls(
        runs["run"].to_numpy(), runs["wall_s"].to_numpy(float), tl["run"].to_numpy(), tl["end_s"].to_numpy(float)
    )
    return dict(zip(runs["run"].astype(int).tolist(), walls))


def _title(t: Tables) -> str:
    problem = t.results.attrs["problem"]
    return f"kernel {problem.get('kernel_name', '?')}"


def convergence(t: Tables, plt):
    res, axis = _objective(t)
    res = res.sort_values(["run", "finished_s", "config_id"], kind="stable").reset_index(drop=True)
    walls = _walls_by_run(t)
    offsets, acc = {}, 0.0
    for run in sorted(walls):
        offsets[run], acc = acc, acc + walls[run]
    wall = res["finished_s"].to_numpy(float) + res["run"].map(offsets).to_numpy(float)
    scale, unit = _time_unit(acc or float(np.nanmax(wall, initial=0)))
    ok = res["usable"].to_numpy()
    obj = res["objective"].to_numpy(float)
    best = running_best(obj, ok, axis.higher_is_better)
    has_best = np.isfinite(best)
    evals = np.arange(1, len(res) + 1)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    since = "since the run started" if len(offsets) < 2 else "of the runs, end to end"
    for ax, x, xlabel in (
        (axes[0], wall / scale, f"wall time {since} ({unit})"),
        (axes[1], evals, "configurations evaluated (in the order they finished)"),
    ):
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
        if has_best.any():
            ax.step(x[has_best], best[has_best], where="post", color="#08519c", lw=2, label="best so far")
            i = int(np.flatnonzero(ok & (obj == best[-1]))[0])
            ax.plot(
                [x[i]], [obj[i]], marker="*", ms=14, color="#e6550d", ls="none", label=f"best: {obj[i]:.4g} {axis.unit}"
            )
        if len(offsets) > 1:
            starts = (
                [offsets[r] / scale for r in sorted(offsets)][1:]
                if ax is axes[0]
                else [float(np.searchsorted(res["run"].to_numpy(), r)) + 0.5 for r in sorted(offsets)[1:]]
            )
            for k, s in enumerate(starts):
                ax.axvline(s, color="0.4", ls="--", lw=1, label="a new run starts" if k == 0 else None)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    if _wide(obj[ok]):
        axes[0].set_yscale("log")
    axes[0].set_ylabel(f"{axis.label}, {axis.direction}")
    axes[0].set_xlim(left=0)
    axes[1].set_xlim(left=0)
    axes[1].legend(loc="lower right" if axis.higher_is_better else "upper right")
    failed = int((~ok).sum())
    note = f"; {failed} failed configuration(s) not drawn" if failed else ""
    fig.suptitle(f"Convergence of the search: {_title(t)}, {len(res)} configurations{note}")
    fig.tight_layout()
    return fig


def timeline(t: Tables, plt, max_runs: int = 3):
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
        scale, unit = _time_unit(end)
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
    fig.suptitle(f"What each rank did over time{skipped}: {_title(t)}{red}")
    fig.tight_layout(rect=(0, 0.06 if len(shown) > 1 else 0.09, 1, 1))
    return fig


def distribution(t: Tables, plt):
    res, axis = _objective(t)
    ok = res.loc[res["usable"], "objective"].to_numpy(float)
    fig, ax = plt.subplots(figsize=(8, 4.6))
    failed = res.loc[~res["usable"], "status"].value_counts()
    if len(ok):
        wide = _wide(ok)
        bins = np.geomspace(ok.min(), ok.max(), 40) if wide else 40
        ax.hist(ok, bins=bins, color="#6baed6", edgecolor="white", lw=0.5, label="configurations")
        if wide:
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
    ax.set_xlabel(f"{axis.label}{', log scale' if len(ok) and _wide(ok) else ''}")
    ax.set_ylabel("number of configurations")
    ax.grid(alpha=0.3)
    note = ("; not drawn: " + ", ".join(f"{n} {s}" for s, n in failed.items())) if len(failed) else ""
    ax.set_title(f"{axis.title} over the {len(ok)} configurations that ran\n{_title(t)}{note}", fontsize=11)
    fig.tight_layout()
    return fig


def _ticks(ax, labels: list[str]) -> None:
    step = max(1, math.ceil(len(labels) / 12))
    ax.set_xticks(range(0, len(labels), step))
    ax.set_xticklabels(
        labels[::step],
        rotation=45 if max(len(s) for s in labels) > 3 or step > 1 else 0,
        ha="right" if step > 1 or max(len(s) for s in labels) > 3 else "center",
    )


def parameters(t: Tables, plt, seed: int = 0):
    res, axis = _objective(t)
    names = t.results.attrs["param_names"]
    ok = res[res["usable"]]
    varying = [n for n in names if ok[n].nunique() > 1] if len(ok) else []
    fixed = [n for n in names if n not in varying]
    cols = {0: 1, 1: 1, 2: 2, 3: 3, 4: 2}.get(len(varying), 3 if len(varying) <= 9 else 4)
    rows = max(1, math.ceil(len(varying) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.0, 4.2 * cols), 3.2 * rows + 1.3), sharey=True, squeeze=False)
    rng = np.random.default_rng(seed)
    wide = _wide(ok["objective"]) if len(ok) else False
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
        best, median = grouped.max() if axis.higher_is_better else grouped.min(), grouped.median()
        xs = [position[v] for v in best.index]
        ax.plot(xs, median.to_numpy(), color="black", marker="s", ms=4, lw=1.2, label="median per value")
        ax.plot(xs, best.to_numpy(), color="#e6550d", marker="o", ms=4, lw=1.5, label="best per value")
        _ticks(ax, [str(v) for v in values])
        ax.set_xlabel(name)
        ax.grid(alpha=0.3)
        if wide:
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
        f"{axis.title} against each tunable parameter: {_title(t)}, {len(ok)} configurations that ran{fixed_note}",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.05 if rows > 1 else 0.08, 1, 1))
    return fig


def plot(path: str, out_dir: str, which: tuple[str, ...] | None = None, dpi: int = 100) -> list[str]:
    """Write the chosen plots of a cache file into out_dir (by default every one that applies:
    ``pareto`` only to a file of several objectives); returns the paths written."""
    plt = _pyplot()
    data = read(path)
    tables = frames(data)
    if not len(tables.results):
        raise UserError(f"{path} holds no results yet")
    if which is None:
        which = (*PLOTS, PARETO) if data.objective.several else PLOTS
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name in which:
        fig = front.figure(data, plt) if name == PARETO else globals()[name](tables, plt)
        target = os.path.join(out_dir, f"{name}.png")
        fig.savefig(target, dpi=dpi)
        plt.close(fig)
        written.append(target)
    return written
