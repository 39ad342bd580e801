"""What a replay's simulated clock charges beyond each configuration's own recorded durations.

A replay (backends/replay.py) advances each rank's clock by the recorded compile, verify and
benchmark seconds of the configurations it measures. A real run spends more than that, and less.
Rank 0 loads the spec, and every rank starts up, before the first batch. Rank 0 asks the strategy
and writes the file between batches. Compile workers compile ahead while the device measures. So
a rank waits for a compile only when they fell behind. ``RecordedRun`` is what the measured data
says of those. It is taken once from the file (``recorded_run``) and carried to every rank with
the problem. A Kernel Tuner cache records none of it. For one, it says which assumption fills
each gap, and the replay prints that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mpitune.model.timeline import BACKGROUND_PHASES, BESIDE, Clock, PhaseRow, Timeline

# Rank 0's own work between batches, charged per entry into the phase at its recorded mean.
RANK0_PHASES = ("strategy", "write")


@dataclass(frozen=True)
class RecordedRun:
    """The recorded run behind a replay, as the simulated clock needs it.

    ``spec_s``: rank 0 loading the spec, per run. ``startup_s``: each recorded rank's own
    start-up (phase ``startup``), per run, by rank. ``gap_s``: each recorded rank's time in no
    named phase, per configuration it measured. That is bookkeeping, most of it in gaps too
    short to be recorded. ``charges_s``: the mean seconds of one entry into each of rank 0's
    phases ``RANK0_PHASES``.

    ``compile_workers``: the compile workers a rank had. It is the most compiles that
    overlapped on one rank's timeline. The file does not record the count. A run that compiled
    in turn has none. ``recompile_s``: what compiling a configuration again on the same rank
    took, thanks to a compiler's cache. None: as long as the first time. ``compile_ready_s``:
    when each recorded rank's compile workers first compiled, per run, by rank. Workers started
    cold are ready only then, whenever the first order came. A cold start is a fresh process,
    its imports and the compiler's first call. ``retime_compile_s``: the seconds per candidate
    a rank spent compiling, without compile workers, what it timed again. That is calibration
    and confirmation. None: each in turn, as long as its recorded compile.

    ``raced``: some configuration was raced. So the replay gives each configuration the
    launches it got then, racing as the run raced. It does not race again on launches it does
    not have. ``ranks``, ``dealt``: the run's ranks and the rank that measured each
    configuration, by its parameter values. So a replay on as many ranks deals each batch as
    the run did. ``confirmed``: the candidates its confirmation timed again. A replay confirms
    them again where it has them all. Their choice rests on first launches the file does not
    keep. ``schedule``: how the run handed out its work (refill or batches; '' where not
    recorded). A replay of it does the same.

    ``host_verified``: the recorded verification includes a check of the answer on the host
    (Kernel Tuner's). A candidate timed again does not repeat it. So its loading and warm-up are
    charged as one launch, not as its verification. ``source``: what recorded it, for the line
    the replay prints. ``assumptions``: what fills what the source does not record."""

    source: str = "a Kernel Tuner cache"
    spec_s: float = 0.0
    startup_s: tuple[float, ...] = ()
    gap_s: tuple[float, ...] = ()
    charges_s: Mapping[str, float] = field(default_factory=dict)
    compile_workers: int = 0
    recompile_s: float | None = None
    compile_ready_s: tuple[float, ...] = ()
    retime_compile_s: float | None = None
    raced: bool = False
    ranks: int = 0
    dealt: Mapping[tuple[Any, ...], int] = field(default_factory=dict)
    confirmed: frozenset[tuple[Any, ...]] = frozenset()
    schedule: str = ""
    host_verified: bool = True
    assumptions: tuple[str, ...] = (
        "no spec loading or start-up is recorded: none is charged, so the wall time starts at the first batch",
        "rank 0's strategy and file writes are not recorded: none is charged",
        "Kernel Tuner compiles in turn: each recorded compile time stands for one compile worker's",
        "Kernel Tuner's verification checks the answer on the host, which a candidate timed again "
        "(confirmation, calibration) does not: its warm-up is charged as one launch",
    )

    @property
    def complete(self) -> bool:
        """Whether the source recorded all the clock needs (an mpitune run): nothing is assumed."""
        return not self.assumptions

    def rank_startup_s(self, rank: int) -> float:
        """A simulated rank's start-up: the recorded rank's of the same number.

        A rank the run did not have takes the last recorded one's: a worker's, when there were
        several."""
        if not self.startup_s:
            return 0.0
        return self.startup_s[rank] if rank < len(self.startup_s) else self.startup_s[-1]

    def rank_gap_s(self, rank: int) -> float:
        """What a simulated rank spends between phases per configuration, as ``rank_startup_s``."""
        if not self.gap_s:
            return 0.0
        return self.gap_s[rank] if rank < len(self.gap_s) else self.gap_s[-1]

    def rank_compile_ready_s(self, rank: int) -> float:
        """When a simulated rank's compile workers can first compile, as ``rank_startup_s``."""
        if not self.compile_ready_s:
            return 0.0
        return self.compile_ready_s[rank] if rank < len(self.compile_ready_s) else self.compile_ready_s[-1]

    def timeline(self, rank: int) -> Timeline:
        """A replayed rank's timeline: charged as this run was, from its recorded start-up."""
        timeline = Timeline(Clock(simulated=True, charges_s=self.charges_s))
        self.charge_start(timeline, rank)
        return timeline

    def charge_start(self, timeline: Timeline, rank: int) -> None:
        """The recorded spec loading (rank 0) and start-up, as this rank's first phases.

        The simulated clock ends up where they ended."""
        clock = timeline.clock
        start_s = clock.now()
        rows = []
        if rank == 0 and self.spec_s > 0:
            rows.append(PhaseRow(timeline.batch, -1, "spec", start_s, start_s + self.spec_s))
            start_s += self.spec_s
        startup_s = self.rank_startup_s(rank)
        if startup_s > 0:
            rows.append(PhaseRow(timeline.batch, -1, "startup", start_s, start_s + startup_s))
            start_s += startup_s
        timeline.extend(rows)
        clock.advance(start_s - clock.now())

    def describe(self) -> str:
        """One line for the replay's output: what the clock charges and on what it rests."""
        if not self.complete:
            return f"simulated clock from {self.source}; assumed: " + "; ".join(self.assumptions)
        worst = max(self.startup_s, default=0.0)
        racing = "racing as the run raced (its recorded launches)" if self.raced else "every recorded launch"
        return (
            f"simulated clock from {self.source}: spec {self.spec_s:.2f} s and start-up up to {worst:.2f} s, "
            f"rank 0's strategy and writes at their recorded means, {racing}"
        )


def recorded_run(
    timeline: np.ndarray,
    retimed: np.ndarray,
    raced: bool,
    dealt: Mapping[tuple[Any, ...], int],
    confirmed: frozenset[tuple[Any, ...]],
    schedule: str = "",
) -> RecordedRun:
    """A file's runs as one recorded run, from its timeline and retimed launches.

    These are the store's rows, text as text. Phases are per run; a resumed file's runs are
    averaged. ``raced``: whether any result was raced. ``dealt``: which rank measured each
    configuration. ``confirmed``: the candidates confirmed. ``schedule``: how its last run
    handed out its work."""
    runs = max(len(np.unique(timeline["run"])), 1)
    ranks = range(int(timeline["rank"].max()) + 1 if len(timeline) else 0)
    by_rank = [timeline[timeline["rank"] == rank] for rank in ranks]  # each rank's rows, split once
    rank0 = by_rank[0] if by_rank else timeline
    startup = [_total_s(rows, "startup") / runs for rows in by_rank]
    charges_s = {}
    for phase in RANK0_PHASES:
        if entries := _entries(rank0, phase):
            charges_s[phase] = _total_s(rank0, phase, BESIDE[phase]) / entries
    return RecordedRun(
        source="an mpitune run",
        spec_s=_total_s(rank0, "spec") / runs,
        startup_s=tuple(startup),
        gap_s=tuple(gap_s(rows) for rows in by_rank),
        charges_s=charges_s,
        compile_workers=compile_workers(timeline),
        recompile_s=recompile_s(timeline),
        compile_ready_s=tuple(_first_s(rows, "compile_ahead") for rows in by_rank),
        retime_compile_s=retime_compile_s(timeline, retimed),
        raced=raced,
        ranks=len(ranks),
        dealt=dict(dealt),
        confirmed=confirmed,
        schedule=schedule,
        host_verified=False,
        assumptions=(),
    )


def gap_s(rows: np.ndarray) -> float:
    """One rank's time in no phase but ``other``, per configuration it measured, over its runs.

    That is bookkeeping between phases, most of it in gaps too short to be recorded."""
    own = rows[~np.isin(rows["phase"], BACKGROUND_PHASES)]
    measured = int((own["phase"] == "verify").sum())
    if not measured:
        return 0.0
    wall_s = sum(float(own["end_s"][own["run"] == run].max()) for run in np.unique(own["run"]))
    named_s = float((own["end_s"] - own["start_s"])[own["phase"] != "other"].sum())
    return max(wall_s - named_s, 0.0) / measured


def retime_compile_s(timeline: np.ndarray, retimed: np.ndarray) -> float | None:
    """The seconds a rank spent compiling per candidate it timed again, without compile workers.

    Candidates are timed again for calibration and confirmation. A backend compiles those side
    by side: the C backend, on the rank's cores. None when no rank compiled any that way."""
    compiles = timeline[(timeline["phase"] == "compile") & (timeline["config_id"] < 0)]
    candidates = 0
    for run, rank, batch in {
        (int(a), int(b), int(c)) for a, b, c in zip(*(compiles[k] for k in ("run", "rank", "batch")))
    }:
        mine = retimed[(retimed["run"] == run) & (retimed["rank"] == rank) & (retimed["batch"] == batch)]
        candidates += len(np.unique(mine["config_id"]))
    return _total_s(compiles, "compile") / candidates if candidates else None


def twice_measured(timeline: np.ndarray) -> set[int]:
    """The configurations verified more than once in a run.

    They are those whose first launch survived a chunk's first pass. They were then measured
    whole (scheduling/rank.py, ``two_passes``)."""
    verified = timeline[(timeline["phase"] == "verify") & (timeline["config_id"] >= 0)]
    pairs, counts = np.unique(np.stack([verified["run"], verified["config_id"]]), axis=1, return_counts=True)
    return {int(c) for c in pairs[1][counts > 1]}


def compile_workers(timeline: np.ndarray) -> int:
    """The most background compiles that overlapped on one rank of one run.

    That is its compile workers, when a chunk kept them all busy. The first chunk of a run does,
    when it is longer than them."""
    ahead = timeline[timeline["phase"] == "compile_ahead"]
    most = 0
    for run, rank in {(int(a), int(b)) for a, b in zip(ahead["run"], ahead["rank"])}:
        mine = ahead[(ahead["run"] == run) & (ahead["rank"] == rank)]
        # +1 at each start, -1 at each end; an end at the same moment as a start comes first.
        moments = np.concatenate([mine["start_s"], mine["end_s"]])
        steps = np.concatenate([np.ones(len(mine)), -np.ones(len(mine))])
        order = np.lexsort((steps, moments))
        most = max(most, int(np.cumsum(steps[order]).max()))
    return most


def recompile_s(timeline: np.ndarray) -> float | None:
    """The median time of compiling a configuration again on the rank that compiled it before.

    Such a configuration survived a first pass, or is a candidate confirmed. A compiler's cache
    (CuPy's on disk) answers in a fraction of the first compile's time. None when no compile
    was repeated."""
    ahead = timeline[(timeline["phase"] == "compile_ahead") & (timeline["config_id"] >= 0)]
    ahead = ahead[np.lexsort((ahead["start_s"], ahead["config_id"], ahead["rank"], ahead["run"]))]
    keys = np.stack([ahead["run"], ahead["rank"], ahead["config_id"]])
    again = np.zeros(len(ahead), dtype=bool)
    again[1:] = (keys[:, 1:] == keys[:, :-1]).all(axis=0)
    if not again.any():
        return None
    return float(np.median(ahead["end_s"][again] - ahead["start_s"][again]))


def _first_s(rows: np.ndarray, phase: str) -> float:
    """When ``phase`` first began in each run of ``rows``, averaged over the runs that have it; 0 if none."""
    mine = rows[rows["phase"] == phase]
    firsts = [float(mine["start_s"][mine["run"] == run].min()) for run in np.unique(mine["run"])]
    return float(np.mean(firsts)) if firsts else 0.0


def _total_s(rows: np.ndarray, *phases: str) -> float:
    mine = rows[np.isin(rows["phase"], phases)]
    return float((mine["end_s"] - mine["start_s"]).sum())


def _entries(rank0: np.ndarray, phase: str) -> int:
    """How many times rank 0 entered ``phase``.

    A piece of it, or of its ``BESIDE`` phase, that begins where another ended is the same entry.
    That piece was cut where rank 0's own chunk began or ended."""
    mine = rank0[np.isin(rank0["phase"], (phase, BESIDE[phase]))]
    mine = mine[np.lexsort((mine["start_s"], mine["run"]))]
    same = (mine["run"][1:] == mine["run"][:-1]) & (mine["start_s"][1:] == mine["end_s"][:-1])
    return int(len(mine) - same.sum())
