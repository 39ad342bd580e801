"""Where each rank's time went, from the recorded timeline: the phase totals per rank, the waits
at the end of each batch and the start-up, for ``report`` and the pages and plots that show it.
Every second is a measured interval on the run's clock, so a rank's busy and idle time add up
to its wall time.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from mpitune.model.timeline import BACKGROUND_PHASES, IDLE_PHASES, PHASES
from mpitune.store.reader import CacheData

MEASURING = ("compile", "verify", "benchmark")
# The phases that ``RankTime`` holds in a field of their own (``compile_s``, ...), beside ``phases``.
_OWN_FIELDS = (*MEASURING, "spec", "startup", "strategy", "write", "wait", "compile_ahead")
# Columns of the per-rank table, in the order a run goes through them.
PHASE_COLUMNS = PHASES


def run_walls(run: np.ndarray, wall_s: np.ndarray, timeline_run: np.ndarray, end_s: np.ndarray) -> list[float]:
    """The wall time of each run (columns ``run`` and ``wall_s`` of runs; ``run`` and ``end_s``
    of the timeline). A run that never finished (killed, or still running) has no wall_s; its
    last recorded phase stands in."""
    walls = []
    for number, wall in zip(run.tolist(), wall_s.tolist()):
        if math.isnan(wall):
            ends = end_s[timeline_run == number]
            wall = float(ends.max()) if len(ends) else 0.0
        walls.append(float(wall))
    return walls


@dataclass(frozen=True)
class RankTime:
    """One rank's seconds over all runs. ``other_s`` is all busy time outside compile, verify and
    benchmark (start-up, strategy, writing and unnamed gaps); ``phases`` splits every second by
    phase name; ``compile_ahead_s`` went by in background workers beside the phases."""

    rank: int
    host: str
    device: str
    device_detail: str
    compile_s: float
    verify_s: float
    benchmark_s: float
    other_s: float
    busy_s: float
    idle_s: float
    wall_s: float
    spec_s: float
    startup_s: float
    strategy_s: float
    write_s: float
    wait_s: float
    phases: dict[str, float]
    configs: int
    compile_ahead_s: float
    efficiency: float | None  # the share of its wall time spent measuring; None without wall time


@dataclass(frozen=True)
class GatherWaits:
    """How often ranks waited for others at the end of a batch (see ``gather_waits``)."""

    rank_batches: int
    waited: int
    threshold: float  # the share of the batch beyond which a wait counts
    wait_s: float


@dataclass(frozen=True)
class Startup:
    """The spec's own loading on rank 0 apart from mpitune's start-up of each rank."""

    spec_s: float
    mpitune_min_s: float
    mpitune_max_s: float


def per_rank(data: CacheData) -> list[RankTime]:
    """Phase totals per rank over all runs. A rank's wall time runs from the start of the
    run's clock to its last recorded phase."""
    timeline, ranks, results = data.timeline, data.ranks, data.results
    totals: dict[int, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    for run in np.unique(timeline["run"]):
        rows = timeline[timeline["run"] == run]
        for rank in np.unique(rows["rank"]):
            mine = rows[rows["rank"] == rank]
            t = totals[int(rank)]
            background = np.isin(mine["phase"], BACKGROUND_PHASES)
            t["wall_s"] += float(mine["end_s"][~background].max()) if (~background).any() else 0.0
            for phase, start, end in zip(mine["phase"], mine["start_s"], mine["end_s"]):
                t[phase] += float(end - start)
    where = {int(r["rank"]): (r["host"], r["device"], r["device_detail"]) for r in ranks}  # latest run wins
    measured = Counter(results["rank"].tolist())
    out = []
    for rank in sorted(totals):
        t = totals[rank]
        idle = sum(t[p] for p in IDLE_PHASES)
        busy = sum(v for k, v in t.items() if k not in IDLE_PHASES + BACKGROUND_PHASES and k != "wall_s")
        host, device, detail = where.get(rank, ("?", "?", ""))
        phases = {p: t[p] for p in PHASE_COLUMNS}
        phases.update({k: v for k, v in t.items() if k not in phases and k not in BACKGROUND_PHASES and k != "wall_s"})
        measuring = sum(t[p] for p in MEASURING)
        out.append(
            RankTime(
                rank=rank,
                host=str(host),
                device=str(device),
                device_detail=str(detail),
                other_s=busy - measuring,
                busy_s=busy,
                idle_s=idle,
                wall_s=t["wall_s"],
                phases=phases,
                configs=int(measured.get(rank, 0)),
                efficiency=measuring / t["wall_s"] if t["wall_s"] > 0 else None,
                **{f"{phase}_s": t[phase] for phase in _OWN_FIELDS},
            )
        )
    return out


WAIT_SHARE = 0.1  # a rank "waited at the gather" when it idled this share of a batch more than the least idle rank


def gather_waits(data: CacheData) -> GatherWaits:
    """How often ranks waited for others at the end of a batch.

    Every rank waits while rank 0 writes and asks the strategy; what one rank waits beyond the
    least-waiting rank of the same batch is time it stood idle because others were still
    measuring. Counted per (rank, batch) where that exceeds ``WAIT_SHARE`` of the batch."""
    timeline = data.timeline
    waited = rank_batches = 0
    extra_s = 0.0
    for run in np.unique(timeline["run"]):
        rows = timeline[
            (timeline["run"] == run) & (timeline["batch"] >= 0) & ~np.isin(timeline["phase"], BACKGROUND_PHASES)
        ]
        for batch in np.unique(rows["batch"]):
            mine = rows[rows["batch"] == batch]
            span = float(mine["end_s"].max() - mine["start_s"].min())
            waits = {}
            for rank in np.unique(mine["rank"]):
                r = mine[(mine["rank"] == rank) & np.isin(mine["phase"], IDLE_PHASES)]
                waits[int(rank)] = float((r["end_s"] - r["start_s"]).sum())
            least = min(waits.values())
            for w in waits.values():
                rank_batches += 1
                extra_s += w - least
                waited += int(span > 0 and w - least > WAIT_SHARE * span)
    return GatherWaits(rank_batches, waited, WAIT_SHARE, extra_s)


def startup(ranks: list[RankTime]) -> Startup:
    """The spec's own loading (rank 0, all runs) apart from mpitune's start-up of each rank: a
    spec may compute its reference answer for seconds, which no start-up work of mpitune's
    can shorten. Python, imports and MPI start before the run's clock and are in neither."""
    mpitune_s = [r.startup_s for r in ranks]
    return Startup(sum(r.spec_s for r in ranks), min(mpitune_s, default=0.0), max(mpitune_s, default=0.0))
