"""Where each rank's time went, from the recorded timeline.

It gives the phase totals per rank, the waits at the end of each batch and the start-up. They are
for ``report`` and the pages and plots that show it. Every second is a measured interval on the
run's clock. So a rank's busy and idle time add up to its wall time.
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
    """The wall time of each run: ``run`` and ``wall_s`` of runs, ``run`` and ``end_s`` of the timeline.

    A run that never finished (killed, or still running) has no wall_s. Its last recorded phase
    stands in."""
    walls = []
    for number, wall in zip(run.tolist(), wall_s.tolist()):
        if math.isnan(wall):
            ends = end_s[timeline_run == number]
            wall = float(ends.max()) if len(ends) else 0.0
        walls.append(float(wall))
    return walls


@dataclass(frozen=True)
class RankTime:
    """One rank's seconds over all runs.

    ``other_s`` is all busy time outside compile, verify and benchmark. That is start-up, strategy,
    writing and unnamed gaps. ``phases`` splits every second by phase name. ``compile_ahead_s`` went
    by in background workers beside the phases."""

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


class PhaseTotals:
    """Each rank's seconds per phase and wall time, summed over the timeline's rows as they come.

    They come a chunk at a time, since ``report`` streams a file of any size. They are summed in the
    order one pass over the rows sums them. Runs go in order, rows in the file's order, and each
    rank's phases in the order first seen. So a report of a file streamed and one of the file read
    whole agree to the last digit. ``run_ends`` is each run's last recorded end, background phases
    too."""

    def __init__(self) -> None:
        self._seconds: dict[int, dict[str, float]] = {}
        self._walls: dict[tuple[int, int], float] = {}  # by (run, rank): its last end outside the background
        self.run_ends: dict[int, float] = {}

    def add(self, rows: np.ndarray) -> None:
        durations = rows["end_s"] - rows["start_s"]
        background = np.isin(rows["phase"], BACKGROUND_PHASES)
        for run in np.unique(rows["run"]).tolist():
            self.run_ends[run] = max(self.run_ends.get(run, -math.inf), float(rows["end_s"][rows["run"] == run].max()))
        for rank in np.unique(rows["rank"]).tolist():
            mine = rows["rank"] == rank
            for run in np.unique(rows["run"][mine]).tolist():
                own = mine & (rows["run"] == run) & ~background
                last = float(rows["end_s"][own].max()) if own.any() else 0.0
                self._walls[(run, rank)] = max(self._walls.get((run, rank), last), last)
            names, first, which = np.unique(rows["phase"][mine], return_index=True, return_inverse=True)
            seconds = self._seconds.setdefault(rank, {})
            for name in names[np.argsort(first)].tolist():
                seconds.setdefault(name, 0.0)
            sums = np.array([seconds[n] for n in names.tolist()])
            np.add.at(sums, which, durations[mine])  # one row after another, as a loop adds them
            seconds.update(zip(names.tolist(), sums.tolist()))

    def totals(self) -> dict[int, defaultdict[str, float]]:
        """By rank: ``wall_s``, then its seconds per phase.

        ``wall_s`` is the sum over runs, in order, of the rank's last end in each."""
        out: dict[int, defaultdict[str, float]] = {}
        for rank in sorted(self._seconds):
            t = out[rank] = defaultdict(float)
            for (_, r), wall in sorted(self._walls.items()):
                if r == rank:
                    t["wall_s"] += wall
            t.update(self._seconds[rank])
        return out


def per_rank(data: CacheData) -> list[RankTime]:
    """Phase totals per rank over all runs.

    A rank's wall time runs from the start of the run's clock to its last recorded phase."""
    totals = PhaseTotals()
    totals.add(data.timeline)
    return rank_times(totals, data.ranks, Counter(data.results["rank"].tolist()))


def rank_times(totals: PhaseTotals, ranks: np.ndarray, measured: Counter[int]) -> list[RankTime]:
    """Each rank's time, from the ``totals`` of the whole timeline.

    It also uses the ``ranks`` table and the configurations each rank measured."""
    by_rank = totals.totals()
    where = {int(r["rank"]): (r["host"], r["device"], r["device_detail"]) for r in ranks}  # latest run wins
    out = []
    for rank in sorted(by_rank):
        t = by_rank[rank]
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


class BatchWaits:
    """What ``gather_waits`` needs of the timeline's rows, taken a chunk at a time.

    That is each batch's span and each rank's idle seconds in it. The idle seconds are its idle rows'
    durations, in the file's order, so that they sum as the rows read whole do. A few numbers per
    batch, however many rows."""

    def __init__(self) -> None:
        self._spans: dict[tuple[int, int], tuple[float, float]] = {}  # (run, batch): first start, last end
        self._idle: dict[tuple[int, int], dict[int, list[np.ndarray]]] = {}  # (run, batch): by rank

    def add(self, rows: np.ndarray) -> None:
        rows = rows[(rows["batch"] >= 0) & ~np.isin(rows["phase"], BACKGROUND_PHASES)]
        if not len(rows):
            return
        rows = rows[np.lexsort((rows["rank"], rows["batch"], rows["run"]))]  # stable: rows keep their order
        keys = np.stack([rows["run"], rows["batch"], rows["rank"]], axis=1).astype(np.int64)
        starts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]).any(axis=1)])
        idle = np.isin(rows["phase"], IDLE_PHASES)
        for start, end in zip(starts.tolist(), np.r_[starts[1:], len(rows)].tolist()):
            run, batch, rank = keys[start].tolist()
            part = rows[start:end]
            first, last = self._spans.get((run, batch), (math.inf, -math.inf))
            first, last = min(first, float(part["start_s"].min())), max(last, float(part["end_s"].max()))
            self._spans[(run, batch)] = (first, last)
            waits = self._idle.setdefault((run, batch), {}).setdefault(rank, [])
            waits.append((part["end_s"] - part["start_s"])[idle[start:end]])

    def result(self) -> GatherWaits:
        waited = rank_batches = 0
        extra_s = 0.0
        for key in sorted(self._spans):
            first, last = self._spans[key]
            span = last - first
            by_rank = self._idle[key]
            waits = {rank: float(np.concatenate(by_rank[rank]).sum()) for rank in sorted(by_rank)}
            least = min(waits.values())
            for w in waits.values():
                rank_batches += 1
                extra_s += w - least
                waited += int(span > 0 and w - least > WAIT_SHARE * span)
        return GatherWaits(rank_batches, waited, WAIT_SHARE, extra_s)


def gather_waits(data: CacheData) -> GatherWaits:
    """How often ranks waited for others at the end of a batch.

    Every rank waits while rank 0 writes and asks the strategy. Some ranks wait beyond the
    least-waiting rank of the same batch. That extra is time they stood idle because others were
    still measuring. Counted per (rank, batch) where that exceeds ``WAIT_SHARE`` of the batch."""
    waits = BatchWaits()
    waits.add(data.timeline)
    return waits.result()


def startup(ranks: list[RankTime]) -> Startup:
    """The spec's own loading (rank 0, all runs), apart from mpitune's start-up of each rank.

    A spec may compute its reference answer for seconds. No start-up work of mpitune's can shorten
    that. Python, imports and MPI start before the run's clock and are in neither."""
    mpitune_s = [r.startup_s for r in ranks]
    return Startup(sum(r.spec_s for r in ranks), min(mpitune_s, default=0.0), max(mpitune_s, default=0.0))
