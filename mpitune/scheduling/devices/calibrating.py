"""Calibration during the search: every rank times one reference configuration now and then, from
which rank 0 estimates each rank's device factor.

Devices of one model differ by a few percent, and a configuration's median carries its rank's bias:
among configurations a few percent apart, the bias picks the best. Each calibration is every rank's
time of the reference (the first configuration that passed, later the best so far) at about one
moment. The factors come from all of them (model/judging/confirmation.py, ``judge``). Strategies,
racing and the best so far compare calibrated times (a time over its rank's factor); the file keeps
the raw times, the launches and every estimate.

A calibration costs each rank a compile and ``ROUNDS`` launches. Later ones come at most every
``EVERY_BATCHES`` batches, while they cost at most ``SHARE_OF_RUN`` of the run. An estimate is
redone once the calibrations grew by ``REESTIMATE_GROWTH`` (docs/analysis.md). Results read back
from the file stay as measured: their devices are not this run's.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from mpitune.model.judging.confirmation import DeviceFactor, flag_z, judge
from mpitune.model.judging.racing import Race
from mpitune.model.result import Result, Scored, remade
from mpitune.model.work import Launch, Retime, Work
from mpitune.scheduling.messages import Report

log = logging.getLogger(__name__)
R = TypeVar("R", bound=Result)

ROUNDS = 5  # launches of the reference per rank and calibration
EVERY_BATCHES = 4
SHARE_OF_RUN = 0.02
RESAMPLES = 200  # the bootstrap of the factors' errors; calibrations are many and small
_DRIFT_AFTER = 4  # calibrations before a drift can be told
REESTIMATE_GROWTH = 0.125  # the share by which calibrations grow before the factors are estimated again


class Calibrating:
    """Rank 0's calibration: when to time the reference, what the ranks' factors are, and
    results and races in calibrated time."""

    def __init__(self, ranks: int, wanted: bool, margin: float = 0.02, seed: int = 0):
        self.ranks, self.margin, self.seed = ranks, margin, seed
        self.wanted = ranks > 1 and wanted
        self.factor = np.ones(ranks)  # each rank's times over the common time
        self.estimate: tuple[DeviceFactor, ...] = ()
        self._first: Scored | None = None  # the first result that passed: the first reference
        self._events: list[tuple[int, list[tuple[int, Launch]]]] = []  # (reference, launches)
        self._sent_batch = -EVERY_BATCHES
        self._estimate_at = 1  # calibrations recorded at which the factors are next estimated
        self._spent_s = 0.0  # what the calibrations cost each rank, by the reference's own cost
        self._flagged: set[int] = set()

    def reference(self, batch: int, now_s: float, best: Scored | None, work: Callable[[int], Work]) -> Retime | None:
        """What every rank times before its chunk of ``batch``; None when no calibration is due."""
        if not self.wanted or self._first is None or batch - self._sent_batch < EVERY_BATCHES:
            return None
        ref = self._first if not self._events or best is None else best
        cost_s = ref.compile_s + (1 + ROUNDS) * ref.time_ms / 1e3
        if self._events and self._spent_s + cost_s > SHARE_OF_RUN * now_s:
            return None  # the first calibration always; later ones while they stay cheap
        self._sent_batch = batch
        self._spent_s += cost_s
        return Retime.of((work(ref.config_id),), ROUNDS, phase="calibrate")

    def observe(self, results: Sequence[Scored]) -> None:
        if self._first is None:
            self._first = next((r for r in results if r.ok and math.isfinite(r.time_ms) and r.rank >= 0), None)

    def record(self, reports: Sequence[Report]) -> tuple[DeviceFactor, ...]:
        """Learn from the reference's launches in one batch's reports. Returns the new estimate of
        the factors, or none where it stands: no calibration, not every rank's launches, or too few
        calibrations since the last estimate."""
        launches = [(rank, x) for rank, report in enumerate(reports) for x in report.calibration]
        if not launches or {rank for rank, x in launches if math.isfinite(x.time_ms)} != set(range(self.ranks)):
            return ()
        self._events.append((launches[0][1].config_id, launches))
        if len(self._events) < self._estimate_at:
            return ()
        self._estimate_at = max(len(self._events) + 1, math.ceil(len(self._events) * (1 + REESTIMATE_GROWTH)))
        self.estimate = self._estimated(self._events)
        if not self.estimate:
            return ()
        for f in self.estimate:
            self.factor[f.rank] = f.factor
        self._drifted()
        for f in self.estimate:
            if f.flagged and f.rank not in self._flagged:
                self._flagged.add(f.rank)
                log.warning("rank %d's device times %.3g x the others' (calibration, ± %.2g)", f.rank, f.factor, f.sd)
        return self.estimate

    def _estimated(self, events: Sequence[tuple[int, list[tuple[int, Launch]]]]) -> tuple[DeviceFactor, ...]:
        # Each calibration stands in for a candidate: the ranks' times of one configuration at one moment.
        rank, event, round_, time_ms = zip(
            *[(r, e, x.round, x.time_ms) for e, (_, ts) in enumerate(events) for r, x in ts]
        )
        verdict = judge(  # the calibrations ran batches apart: their rounds are not paired; the factors alone
            np.array(rank, dtype=np.int64),
            np.array(event, dtype=np.int64),
            np.array(round_, dtype=np.int64),
            np.array(time_ms, dtype=np.float64),
            seed=self.seed,
            flag_pct=100 * self.margin,
            resamples=RESAMPLES,
            paired=False,
            intervals=False,
        )
        return verdict.factors if verdict is not None else ()

    def _drifted(self) -> None:
        """Flag a rank whose factor moved between the first and the second half of the calibrations.
        It must move by more than their noise plus what flagging a device takes. Each half's factors
        are taken relative to their median: one device that slows down moves the common time, and so
        every other factor a little."""
        if len(self._events) < _DRIFT_AFTER:
            return
        half = len(self._events) // 2
        early, late = self._estimated(self._events[:half]), self._estimated(self._events[half:])
        if not early or not late:
            return
        early_mid = float(np.median([f.factor for f in early]))
        late_mid = float(np.median([f.factor for f in late]))
        by_rank = {f.rank: f for f in early}
        drifted, z = set(), flag_z(len(late))
        for f in late:
            e = by_rank.get(f.rank)
            moved = (f.factor / late_mid) / (e.factor / early_mid) - 1 if e is not None else 0.0
            if e is not None and abs(moved) > z * math.hypot(f.sd, e.sd) + self.margin:
                drifted.add(f.rank)
                if f.rank not in self._flagged:
                    log.warning(
                        "rank %d's device drifts: %.3g x the others' early on, %.3g x lately",
                        f.rank,
                        e.factor,
                        f.factor,
                    )
        self.estimate = tuple(dataclasses.replace(f, flagged=f.flagged or f.rank in drifted) for f in self.estimate)

    def factor_sd(self) -> dict[int, float]:
        """Each rank's factor's standard error relative to the factor, from the latest estimate. A
        time calibrated by it is uncertain by this besides its own noise. Empty before the first
        estimate, while times are as measured."""
        return {f.rank: f.sd / f.factor for f in self.estimate if f.factor > 0}

    def scored(self, result: Scored) -> Scored:
        """``result`` scored in calibrated time (its time over its rank's factor), for the strategy
        and the best so far. Its raw times stay as measured, for the file."""
        if not self.wanted or not result.ok:
            return result
        time_ms = result.time_ms / self._of(result)  # from the raw time: scoring twice changes nothing
        return remade(result, objective=time_ms, scores=(time_ms, *result.scores[1:]))

    def raced(self, result: R) -> R:
        """``result`` in calibrated time: what the ranks race against and confirmation picks from."""
        f = self._of(result)
        if f == 1.0:
            return result
        return remade(result, time_ms=result.time_ms / f, times_ms=tuple(t / f for t in result.times_ms))

    def race_of(self, race: Race | None, rank: int) -> Race | None:
        """The race in calibrated time as ``rank`` sees it: the best in its device's time."""
        if race is None or self.factor[rank] == 1.0:
            return race
        return dataclasses.replace(race, best_ms=race.best_ms * float(self.factor[rank]))

    def _of(self, result: Result) -> float:
        return float(self.factor[result.rank]) if 0 <= result.rank < self.ranks else 1.0
