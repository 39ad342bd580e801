"""Racing: a configuration clearly slower than the best known gets no more launches.

Clearly slower means slower by more than this run's noise allows, in its launches so far.

``RaceRule.MAJORITY`` is exact. ``best_ms`` is the best median known. A configuration is stopped
once more than half of its ``iterations`` timed launches each took longer than ``ratio`` x
``best_ms``. Its median over all ``iterations`` launches would then exceed that bound too. That
holds whatever the launches it did not get would have taken. So it could not have been the best
(``ratio`` >= 1). ``ratio`` is the largest spread (slowest launch / median) of any fully timed
configuration of the run. It is never below ``RATIO_FLOOR``. So only configurations clearly
slower than the best lose launches. A raced configuration keeps status ``ok``. Its median is
that of the launches it got (above ``ratio`` x the best), and ``Result.raced`` says so.

``RaceRule.SPREAD`` stops sooner, on the run's measured noise instead of on arithmetic alone. It
stops once every timed launch so far (at least one) took longer than ``ratio`` x ``best_ms``. No
fully timed configuration of the run had a launch slower than ``ratio`` x its median. So a
configuration whose fastest launch is beyond the bound has a median above ``best_ms``. That holds
as long as it is no noisier than what the run has seen.

``RaceRule.FIRST``, the default, stops sooner still: on the verification launch. That is the
first launch, on reset arguments, also the warm-up, before any timed launch. It stops once that
launch took longer than ``first_ratio`` x ``best_ms``. ``first_ratio`` is the largest ratio of a
fully timed configuration's first launch to its median. A first launch is colder than the rest.
So this is the noise that guards a configuration whose first launch was merely cold. It is never
below the spread ``ratio``, and so never below ``RATIO_FLOOR``. A configuration whose first
launch is beyond that bound then has a median above ``best_ms``. That holds as long as its first
launch is no colder, relative to its median, than the run has measured.

One that survives its first launch is raced as under ``SPREAD``. The first-launch stop already
rests on the run's measured noise. So the majority's exactness for the timed launches would buy
nothing it has not given up, at just over half of them. The assumption is the price.
Confirmation (model/judging/confirmation.py) pays for it. It times again every raced
configuration that stopped near the bound. There a first launch a little colder than the run
has seen could have stopped the best. A configuration stopped on its first launch has that
launch as its one time (``times_ms`` and ``time_ms``, above the bound). So the file and the
strategies see a time no better than what it showed.

Racing needs the objective to be the kernel time. Only then is "slower than the best" a
statement about the launches a rank sees. The Manager turns racing off otherwise.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mpitune.model.result import Result

RATIO_FLOOR = 1.1  # configurations within this of the best always get every launch


class RaceRule(enum.Enum):
    """When a configuration's launches so far are enough to stop timing it."""

    FIRST = "first"  # its first (verification) launch beyond the first-launch bound; then as SPREAD
    MAJORITY = "majority"  # more than half of all its launches beyond the bound: exact
    SPREAD = "spread"  # every launch so far beyond the bound: exact within the run's measured noise


@dataclass(frozen=True)
class Race:
    """What a rank races against: the best median known and the noise ratios of the run so far."""

    best_ms: float = math.inf
    ratio: float = RATIO_FLOOR  # the largest spread (slowest timed launch / median) measured
    rule: RaceRule = RaceRule.FIRST
    first_ratio: float = RATIO_FLOOR  # the largest first launch / median measured

    @property
    def first_bound_ms(self) -> float:
        """What a first launch may take and still be timed.

        That is ``first_ratio`` (never below the spread ``ratio``) x the best median known."""
        return max(self.first_ratio, self.ratio) * self.best_ms

    def lost_first(self, first_ms: float) -> bool:
        """Whether, under ``FIRST``, the verification launch alone stops the configuration.

        It does when it took longer than a first launch of the best could, by what the run has
        measured. A first launch that was not timed (NaN) stops nothing."""
        return self.rule is RaceRule.FIRST and first_ms > self.first_bound_ms

    def lost(self, times_ms: Sequence[float], iterations: int) -> bool:
        """Whether timing should stop after ``times_ms``.

        Under ``MAJORITY`` it stops when a majority of all ``iterations`` launches is already
        beyond what noise explains. The median of all of them would be too. Under ``SPREAD``
        and ``FIRST`` it stops when even the fastest launch so far is. A backend asks after
        every launch, so it keeps a ``Standing`` instead of a list."""
        standing = self.standing(iterations)
        for t in times_ms:
            standing.add(t)
        return standing.lost

    def standing(self, iterations: int) -> Standing:
        """A configuration's standing in this race before its first timed launch."""
        return Standing(self.ratio * self.best_ms, iterations // 2 if self.rule is RaceRule.MAJORITY else None)

    @property
    def looks_ahead(self) -> bool:
        """Whether a rank should take its chunk in two passes (scheduling/rank.py).

        The first pass makes every first launch before any timed one. Only the first-launch
        rule decides on first launches."""
        return self.rule is RaceRule.FIRST

    @property
    def defers_all(self) -> bool:
        """Whether this is a chunk's first pass (``first_pass``): no best median is 0 ms."""
        return self.rule is RaceRule.FIRST and self.best_ms == 0.0

    def first_pass(self) -> Race:
        """A race every timed first launch loses: the chunk's first pass.

        The first pass launches each configuration once. It defers what each deserves until the
        chunk's fastest first launches are known. Timing in the order the chunk came in, a rank
        fully times every configuration that beats the best so far by less than the bound.
        Before a good one is found, that is most of them. docs/performance.md ("Racing")
        measures what it costs."""
        return dataclasses.replace(self, best_ms=0.0)

    def after(self, results: Iterable[Result]) -> Race:
        """This race after ``results``.

        Fully timed configurations lower the best median and may widen the ratios. A first
        launch counts where it was timed; rows read back from a file have none. Failed and
        raced ones tell nothing about either."""
        best_ms, ratio, first_ratio = self.best_ms, self.ratio, self.first_ratio
        for r in results:
            if not r.ok or r.raced or not r.times_ms or not r.time_ms > 0:
                continue
            best_ms = min(best_ms, r.time_ms)
            ratio = max(ratio, max(r.times_ms) / r.time_ms)
            if math.isfinite(r.first_ms):
                first_ratio = max(first_ratio, r.first_ms / r.time_ms)
        return Race(best_ms, ratio, self.rule, first_ratio)


@dataclass(slots=True)
class Standing:
    """A configuration's timed launches so far, as much as the race needs of them.

    That is how many there were and how many were beyond the bound. It is kept launch by launch.
    So the verdict after each launch costs the same however many came before. Asked of the whole
    list after every launch, it cost a pass over the list each time. Then 10^5 launches of a
    microsecond kernel took longer than their configuration's deadline."""

    bound_ms: float  # ``ratio`` x the best median: what noise explains
    majority: int | None  # MAJORITY: lost once more launches than this are beyond the bound
    launches: int = 0
    beyond: int = 0

    def add(self, time_ms: float) -> bool:
        """Count one more launch, and say whether it lost now.

        A NaN launch is never beyond the bound. A launch within the bound, the common one, costs
        one comparison and a test."""
        self.launches += 1
        if time_ms > self.bound_ms:
            self.beyond += 1
        elif self.majority is None:
            return False  # a launch within the bound: not every launch is beyond it
        return self.lost

    @property
    def lost(self) -> bool:
        """Whether the configuration lost.

        Under ``MAJORITY``, more than half of all the launches asked are beyond the bound. Else
        every launch so far (at least one) is, the fastest too."""
        if self.majority is not None:
            return self.beyond > self.majority
        return self.launches > 0 and self.beyond == self.launches
