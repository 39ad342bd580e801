"""The rows of how the ranks' devices compare, which the writer (cache.py) appends to the file.

There are three tables. ``retimed`` holds every launch of a calibration or a confirmation.
``confirmed`` holds the verdict on each confirmed candidate. ``device_factors`` holds each rank's
device factor.
They are tables of their own beside the search's rows, which they leave untouched. So the
search's medians stay what the search measured.

Rank 0 writes a confirmation after the last report of it came in, and flushes. A run killed
before that leaves no part of it, and the next run confirms again. A confirmation a stop cut
short is kept as far as it went. It keeps its launches, and a row of purpose ``unmade`` for each
launch still owed. A resumed run makes those (``Pending``) before the verdict.

A write cut short (a full disk) can leave rows of zeros at the end of these tables. Such rows are
no verdict, and are read as none. A confirmed row without a positive median is one. A run
without exactly one winner is another.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mpitune.model.judging.confirmation import Candidate, DeviceFactor, Verdict
from mpitune.model.schema import CONFIRMED_DTYPE, DEVICE_FACTOR_DTYPE, RETIMED_DTYPE, SHORT_TEXT
from mpitune.model.work import Launch
from mpitune.store.layout import fixed_text

# The purposes of retimed rows; an ``unmade`` row is a launch a confirmation still owes (NaN).
CALIBRATE, CONFIRM, UNMADE = "calibrate", "confirm", "unmade"


@dataclass(frozen=True)
class Pending:
    """A confirmation a stop cut short, as the file keeps it.

    ``launches`` holds every launch made, as (rank, launch), by every run that worked on it.
    ``owed`` says how many each candidate still owes over all ranks. A resumed run makes those, in
    rounds numbered from ``next_round`` on. So every (rank, candidate, round) stays one launch. The
    run judges them all together."""

    run: int  # the run of its latest part
    batch: int  # the batch that part went out as
    candidates: tuple[int, ...]  # in the order they were first handed out
    launches: tuple[tuple[int, Launch], ...]
    owed: dict[int, int]
    next_round: int
    searched_since: bool  # a later run recorded results: its candidates may no longer be the best

    @property
    def made(self) -> int:
        return len(self.launches)


@dataclass(frozen=True)
class Confirmations:
    """What the file says of its confirmations: the latest verdict, and one a stop cut short."""

    verdict: Verdict | None
    pending: Pending | None


def launch_rows(run: int, batch: int, launches: Sequence[tuple[int, Launch]], purpose: str) -> np.ndarray:
    """The ``retimed`` rows of ``launches``, (rank, launch), of one calibration or confirmation."""
    rows = np.zeros(len(launches), RETIMED_DTYPE)
    tag = fixed_text(purpose, SHORT_TEXT)
    for i, (rank, launch) in enumerate(launches):
        rows[i] = (run, batch, rank, launch.config_id, launch.round, launch.time_ms, tag)
    return rows


def factor_rows(run: int, batch: int, factors: Sequence[DeviceFactor], source: str) -> np.ndarray:
    """The ``device_factors`` rows of one estimate of the ranks' device factors."""
    rows = np.zeros(len(factors), DEVICE_FACTOR_DTYPE)
    tag = fixed_text(source, SHORT_TEXT)
    for i, d in enumerate(factors):
        rows[i] = (run, batch, d.rank, d.factor, d.sd, d.flagged, tag)
    return rows


def confirmed_rows(run: int, verdict: Verdict, started_s: float, finished_s: float) -> np.ndarray:
    """The ``confirmed`` rows of a confirmation's verdict, one per candidate."""
    tied = set(verdict.tied)
    confirmed = np.zeros(len(verdict.candidates), CONFIRMED_DTYPE)
    for i, c in enumerate(verdict.candidates):
        confirmed[i] = (
            run,
            c.config_id,
            c.median_ms,
            c.ci_ms[0],
            c.ci_ms[1],
            c.launches,
            c.config_id == verdict.winner,
            c.config_id in tied,
            started_s,
            finished_s,
        )
    return confirmed


def confirmations(rows: Callable[[str], np.ndarray]) -> Confirmations:
    """The file's confirmations, from ``rows(name)``, what its tables hold."""
    confirmed, factors = rows("confirmed"), rows("device_factors")
    verdict = latest_verdict(confirmed, factors)
    return Confirmations(verdict, pending(rows("retimed"), rows("results")["run"]))


def verdict_rows(confirmed: np.ndarray) -> np.ndarray:
    """The ``confirmed`` rows of the latest run with a verdict, winner first.

    They are real rows (a positive median), exactly one of them the winner. Empty when there is
    none."""
    real: np.ndarray = confirmed[np.isfinite(confirmed["median_ms"]) & (confirmed["median_ms"] > 0)]
    for run in dict.fromkeys(int(r) for r in real["run"][::-1]):
        mine: np.ndarray = real[real["run"] == run]
        if np.count_nonzero(mine["winner"] == 1) == 1:
            first: np.ndarray = mine[np.argsort(mine["winner"] != 1, kind="stable")]
            return first
    return real[:0]


def latest_verdict(confirmed: np.ndarray, factors: np.ndarray) -> Verdict | None:
    """The file's latest verdict as confirmation made it (``verdict_rows``).

    It comes with its run's device factors. None without one. A run that does not confirm again
    says it."""
    mine = verdict_rows(confirmed)
    if not len(mine):
        return None
    run = int(mine["run"][0])
    own = factors[(factors["run"] == run) & (np.char.decode(factors["source"].astype("S")) == CONFIRM)]
    return Verdict(
        winner=int(mine["config_id"][0]),
        candidates=tuple(
            Candidate(
                int(r["config_id"]),
                float(r["median_ms"]),
                (float(r["ci_lo_ms"]), float(r["ci_hi_ms"])),
                int(r["launches"]),
            )
            for r in mine
        ),
        tied=tuple(int(i) for i in mine["config_id"][mine["tied"] == 1]),
        factors=tuple(
            DeviceFactor(int(f["rank"]), float(f["factor"]), float(f["sd"]), bool(f["flagged"])) for f in own
        ),
    )


def pending(retimed: np.ndarray, result_runs: np.ndarray) -> Pending | None:
    """The confirmation a stop cut short, if the file's latest confirmation is one.

    It holds its parts, one per run that worked on it, back to the one that started it. Each part is
    a (run, batch) of ``confirm`` and ``unmade`` rows. The first part's rounds start at 0. A resumed
    part's rounds come after every round before. The latest part's ``unmade`` rows are what is still
    owed. None when the latest part owes nothing. Then it was judged, or lost a device, and the
    next run confirms afresh."""
    purpose = np.char.decode(retimed["purpose"].astype("S"))
    rows = retimed[(purpose == CONFIRM) | (purpose == UNMADE)]
    unmade = purpose[(purpose == CONFIRM) | (purpose == UNMADE)] == UNMADE
    keys = list(dict.fromkeys(zip(rows["run"].tolist(), rows["batch"].tolist())))
    chain: list[np.ndarray] = []
    for run, batch in reversed(keys):
        part = (rows["run"] == run) & (rows["batch"] == batch)
        if not (part & unmade).any():
            return None  # judged, or given up: no confirmation is owed
        chain.append(part)
        if int(rows["round"][part].min()) == 0:
            break
    else:
        return None
    every = np.logical_or.reduce(chain)
    made, last = rows[every & ~unmade], rows[chain[0] & unmade]
    owed = Counter(int(i) for i in last["config_id"])
    run, batch = int(rows["run"][chain[0]][0]), int(rows["batch"][chain[0]][0])
    return Pending(
        run=run,
        batch=batch,
        candidates=tuple(dict.fromkeys(int(i) for i in rows["config_id"][every])),
        launches=tuple(
            (int(r["rank"]), Launch(int(r["config_id"]), int(r["round"]), float(r["time_ms"]))) for r in made
        ),
        owed=dict(owed),
        next_round=int(rows["round"][every].max()) + 1,
        searched_since=bool(len(result_runs) and int(np.max(result_runs)) > run),
    )
