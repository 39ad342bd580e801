"""Racing: a configuration whose timed launches so far show it slower than the best known, by
more than this run's noise allows, gets no more launches.

The rule is exact. A configuration is stopped once more than half of its ``iterations`` launches
have each taken longer than ``ratio`` x ``best_ms``, the best median known: its median over all
``iterations`` launches would then exceed that bound too, whatever the launches it did not get
would have taken, so it could not have been the best (``ratio`` >= 1). The best configuration
is therefore the same as with full timing, even when one of its launches is slow (a cold cache,
a busy core). ``ratio`` is the largest spread (slowest launch / median) of any fully timed
configuration of the run, never below ``RATIO_FLOOR``, so that only configurations clearly
slower than the best lose launches. A raced configuration keeps status ``ok``; its median is
that of the launches it got (above ``ratio`` x the best), and ``Result.raced`` says so.

That is the default rule, ``RaceRule.MAJORITY``. ``RaceRule.SPREAD`` stops sooner, on the
run's measured noise instead of on arithmetic alone: once every launch so far (at least one) took
longer than ``ratio`` x ``best_ms``. Since no fully timed configuration of the run had a launch
slower than ``ratio`` x its median, a configuration whose fastest launch is beyond the bound has
a median above ``best_ms``, as long as it is no noisier than what the run has seen. A slow
configuration then costs its verified launch and one timed launch instead of just over half of
them; the price is that assumption.

Racing needs the objective to be the kernel time: only then is "slower than the best" a
statement about the launches a rank sees (see the Manager, which turns it off otherwise).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mpitune.model.result import Result

RATIO_FLOOR = 1.3  # configurations within this of the best always get every launch


class RaceRule(enum.Enum):
    """When a configuration's launches so far are enough to stop timing it."""

    MAJORITY = "majority"  # more than half of all its launches beyond the bound: exact
    SPREAD = "spread"  # every launch so far beyond the bound: exact within the run's measured noise


@dataclass(frozen=True)
class Race:
    """What a rank races against: the best median known and the noise ratio of the run so far."""

    best_ms: float = math.inf
    ratio: float = RATIO_FLOOR
    rule: RaceRule = RaceRule.MAJORITY

    def lost(self, times_ms: Sequence[float], iterations: int) -> bool:
        """Whether timing should stop: under ``MAJORITY``, a majority of all ``iterations``
        launches is already beyond what noise explains, so the median of all of them would be
        too; under ``SPREAD``, even the fastest launch so far is."""
        bound = self.ratio * self.best_ms
        if self.rule is RaceRule.SPREAD:
            return bool(times_ms) and min(times_ms) > bound
        return sum(t > bound for t in times_ms) > iterations // 2

    def seen(self, results: Iterable[Result]) -> Race:
        """This race after ``results``: fully timed configurations lower the best median and may
        widen the ratio; failed and raced ones tell nothing about either."""
        best_ms, ratio = self.best_ms, self.ratio
        for r in results:
            if not r.ok or r.raced or not r.times_ms or not r.time_ms > 0:
                continue
            best_ms = min(best_ms, r.time_ms)
            ratio = max(ratio, max(r.times_ms) / r.time_ms)
        return Race(best_ms, ratio, self.rule)
