"""The per-rank timeline as a Gantt chart: one row per rank, one bar per phase, waiting in red.

A long run records several phases per configuration: more bars than a browser draws fluidly.
Beyond ``Limits.bars``, each rank's time is cut into equal bins. Each bin is drawn in the phase
that filled most of it, with every phase's share on hover. Adjacent bars of one phase are
merged either way. Runs are laid end to end, as in the convergence chart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from mpitune.model.timeline import PHASES
from mpitune.offline.html.charts import LAYOUT, Chart
from mpitune.offline.html.view import View
from mpitune.offline.plots.timeline import PHASE_COLORS, PHASE_LABELS

MERGE_GAP_S = 1e-6  # bars of one phase closer than this are one bar


@dataclass
class Bars:
    """Bars of one rank, as arrays: start and end, phase and hover text.

    Start and end are in seconds, with the runs laid end to end.
    """

    rank: int
    start: np.ndarray
    end: np.ndarray
    phase: np.ndarray
    text: list[str]


def _merge(start: np.ndarray, end: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """Indices of the bars that begin a merged bar, from sorted bars.

    Each lasts to the end of the last bar of its group.
    """
    if not len(start):
        return np.array([], dtype=int)
    new = np.r_[True, (phase[1:] != phase[:-1]) | (start[1:] - end[:-1] > MERGE_GAP_S)]
    return np.flatnonzero(new)


def _exact(rank: int, where: str, start: np.ndarray, end: np.ndarray, phase: np.ndarray, config: np.ndarray) -> Bars:
    firsts = _merge(start, end, phase)
    lasts = np.r_[firsts[1:] - 1, len(start) - 1] if len(firsts) else firsts
    s, e, p = start[firsts], end[lasts], phase[firsts]
    text = []
    for k, (i, j) in enumerate(zip(firsts, lasts)):
        what = f"configuration {config[i]}" if i == j and config[i] >= 0 else f"{j - i + 1} intervals" if j > i else ""
        text.append(
            f"rank {rank} on {where}<br><b>{PHASE_LABELS.get(p[k], p[k])}</b> {e[k] - s[k]:.3g} s "
            f"({s[k]:.3f} to {e[k]:.3f} s)<br>{what}"
        )
    return Bars(rank, s, e, p, text)


def _binned(
    rank: int, where: str, start: np.ndarray, end: np.ndarray, phase: np.ndarray, width: float, phases: list[str]
) -> Bars:
    """Each bin of ``width`` seconds as one bar in the phase that filled most of it."""
    first = np.floor(start / width).astype(int)
    last = np.maximum(first, np.ceil(end / width).astype(int) - 1)
    nbins = int(last.max()) + 1 if len(last) else 0
    code = np.searchsorted(phases, phase)  # phases is sorted
    filled = np.zeros((nbins, len(phases)))
    single = first == last
    np.add.at(filled, (first[single], code[single]), end[single] - start[single])
    for i in np.flatnonzero(~single):  # long phases: few, split over the bins they cover
        edges = np.arange(first[i], last[i] + 2) * width
        overlap = np.minimum(edges[1:], end[i]) - np.maximum(edges[:-1], start[i])
        filled[first[i] : last[i] + 1, code[i]] += np.maximum(overlap, 0)
    used = np.flatnonzero(filled.sum(axis=1) > 0)
    main = np.asarray(phases)[filled[used].argmax(axis=1)]
    s, e = used * width, (used + 1) * width
    firsts = _merge(s, e, main)
    lasts = np.r_[firsts[1:] - 1, len(s) - 1] if len(firsts) else firsts
    text = []
    for i, j in zip(firsts, lasts):
        shares = filled[used[i] : used[j] + 1].sum(axis=0)
        total = shares.sum()
        parts = ", ".join(
            f"{PHASE_LABELS.get(phases[c], phases[c])} {shares[c] / total:.0%}"
            for c in np.argsort(-shares)
            if shares[c] > 0
        )
        text.append(f"rank {rank} on {where}<br><b>{s[i]:.3f} to {e[j]:.3f} s</b><br>{parts}")
    return Bars(rank, s[firsts], e[lasts], main[firsts], text)


def timeline(v: View) -> Chart:
    tl = v.timeline.sort_values(["rank", "run", "start_s"], kind="stable")
    offset = tl["run"].map(v.run_offsets).to_numpy(float)
    start, end = tl["start_s"].to_numpy(float) + offset, tl["end_s"].to_numpy(float) + offset
    phase, rank = tl["phase"].to_numpy(str), tl["rank"].to_numpy(int)
    config = tl["config_id"].to_numpy(int)
    where = {int(r): f"{h} ({d})" for r, h, d in zip(tl["rank"], tl["host"], tl["device"])}
    ranks = sorted(set(rank.tolist()))
    span = float(end.max()) if len(end) else 0.0
    binned = len(tl) > v.limits.bars and span > 0
    width = span * len(ranks) / v.limits.bars if binned else 0.0
    phases = sorted(set(phase.tolist()))
    bars = []
    for r in ranks:
        mine = rank == r
        args = (r, where.get(r, "?"), start[mine], end[mine], phase[mine])
        bars.append(_binned(*args, width, phases) if binned else _exact(*args, config[mine]))

    fig = go.Figure()
    order = [p for p in PHASES if p in phases] + [p for p in phases if p not in PHASES]
    for p in order:
        xs, bases, ys, texts = [], [], [], []
        for b in bars:
            pick = np.flatnonzero(b.phase == p)
            xs += (b.end[pick] - b.start[pick]).tolist()
            bases += b.start[pick].tolist()
            ys += [f"rank {b.rank}"] * len(pick)
            texts += [b.text[i] for i in pick]
        if xs:
            fig.add_trace(
                go.Bar(
                    x=xs,
                    base=bases,
                    y=ys,
                    orientation="h",
                    name=PHASE_LABELS.get(p, p),
                    marker=dict(color=PHASE_COLORS.get(p, "#17becf"), line=dict(width=0)),
                    text=texts,
                    textposition="none",
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    for run, at in sorted(v.run_offsets.items())[1:]:
        fig.add_vline(
            x=at, line=dict(color="#333", dash="dash", width=1), annotation_text=f"run {run}", annotation_position="top"
        )
    fig.update_layout(
        **LAYOUT,
        barmode="overlay",
        bargap=0.25,
        height=160 + 38 * len(ranks),
        xaxis=dict(
            title="wall time " + ("of the runs, end to end" if v.multi_run else "since the run started") + " (s)"
        ),
        yaxis=dict(categoryorder="array", categoryarray=[f"rank {r}" for r in reversed(ranks)]),
    )
    fig.update_layout(margin=dict(t=60))
    drawn = sum(len(b.start) for b in bars)
    note = (
        f"{len(tl):,} recorded phases drawn as {drawn:,} bars of {width:.3g} s bins; each shows the phase "
        "that filled most of it (hover for the shares)."
        if binned
        else f"{len(tl):,} recorded phases; red is time a rank waited for the others."
    )
    return Chart("timeline", "Timeline of every rank", fig.to_plotly_json(), note)
