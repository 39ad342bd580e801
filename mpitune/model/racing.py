"""Racing: a configuration whose timed launches so far show it slower than the best known, by
more than this run's noise allows, gets no more launches.

The bound is safe by construction. A configuration is stopped after a timed launch when its
fastest launch so far exceeds ``ratio`` x ``best_ms``, the best median known. ``ratio`` is the
largest spread (slowest launch / median) of any fully timed configuration of the run, never
below ``RATIO_FLOOR``. A configuration whose median is at most ``best_ms`` has every launch
within ``ratio`` of its median unless its noise exceeds all the run has shown, so it is never
stopped: the best configuration is the same as with full timing, and only configurations
clearly slower than it lose launches. A raced configuration keeps status ``ok``; its median is
that of the launches it got (at least ``ratio`` x the best), and ``Result.raced`` says so.

Racing needs the objective to be the kernel time: only then is "slower than the best" a
statement about the launches a rank sees (see the Manager, which turns it off otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mpitune.model.result import Result

RATIO_FLOOR = 1.3  # below this a first launch's jitter on a busy device could stop a contender


@dataclass(frozen=True)
class Race:
    """What a rank races against: the best median known and the noise ratio of the run so far."""

    best_ms: float = math.inf
    ratio: float = RATIO_FLOOR

    def lost(self, times_ms: Sequence[float]) -> bool:
        """Whether timing should stop: the fastest launch so far is beyond what noise explains."""
        return bool(times_ms) and min(times_ms) > self.ratio * self.best_ms

    def seen(self, results: Iterable[Result]) -> Race:
        """This race after ``results``: fully timed configurations lower the best median and may
        widen the ratio; failed and raced ones tell nothing about either."""
        best_ms, ratio = self.best_ms, self.ratio
        for r in results:
            if not r.ok or r.raced or not r.times_ms or not r.time_ms > 0:
                continue
            best_ms = min(best_ms, r.time_ms)
            ratio = max(ratio, max(r.times_ms) / r.time_ms)
        return Race(best_ms, ratio)
