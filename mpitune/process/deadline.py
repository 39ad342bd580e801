"""How long one configuration may take before its rank's supervisor ends it as a timeout.

This is the one rule. The supervised worker (isolation.py) applies it to each configuration.
Rank 0 adds it to each batch's deadline (scheduling/faults/deadlines.py). So a configuration that
hangs until its own timeout is not mistaken for a lost rank.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

# Without a timeout in the spec: this many times the median time of a configuration so far,
# and never less than the floor (the first configurations also warm up compilers and caches).
TIMEOUT_FACTOR = 20
TIMEOUT_FLOOR_S = 30.0
# ... and never less than this per timed launch asked: the floor alone suits the few launches of
# Kernel Tuner's default (7), but a healthy configuration of 10^5 launches of a 0.3 ms kernel
# takes 30 s, and the first ones have no median to go by (nor do they ever, if all time out).
LAUNCH_ALLOWANCE_S = 1e-3


def config_limit_s(timeout_s: float | None, config_s: Durations | Iterable[float], iterations: int = 1) -> float:
    """The spec's ``timeout_s``, else ``TIMEOUT_FACTOR`` times the median of ``config_s``.

    ``config_s`` is how long the configurations measured so far took. The limit is at least
    ``config_floor_s(iterations)``."""
    if timeout_s is not None:
        return timeout_s
    if not isinstance(config_s, Durations):  # a few seconds listed (tests, one-off callers)
        config_s = Durations(config_s)
    if not config_s:
        return config_floor_s(iterations)
    return max(config_floor_s(iterations), TIMEOUT_FACTOR * config_s.median_s)


def config_floor_s(iterations: int) -> float:
    """The least a configuration of ``iterations`` timed launches is given.

    It is ``TIMEOUT_FLOOR_S``, or ``LAUNCH_ALLOWANCE_S`` per launch where that is more. The
    allowance is more beyond 30,000 launches. It gives 100 s at 10^5 launches. At 10^6, the most
    a spec may ask, it gives 1,000 s."""
    return max(TIMEOUT_FLOOR_S, iterations * LAUNCH_ALLOWANCE_S)


class Durations:
    """How long the configurations measured so far took, as the limit needs them: their median.

    They are kept in two heaps: the lower half a max-heap, the upper a min-heap. Rank 0 asks for
    the median of every configuration of the run at each hand-out. A worker asks at each
    configuration. Adding one costs O(log n) and the median O(1). Partitioning the growing list
    each time made the cost per configuration grow with the run. A NaN duration tells nothing
    and is left out."""

    def __init__(self, seconds: Iterable[float] = ()):
        self._lower: list[float] = []  # negated: heapq keeps a min-heap
        self._upper: list[float] = []
        self.extend(seconds)

    def __len__(self) -> int:
        return len(self._lower) + len(self._upper)

    def append(self, seconds: float) -> None:
        if math.isnan(seconds):
            return
        if self._lower and seconds > -self._lower[0]:
            heapq.heappush(self._upper, seconds)
        else:
            heapq.heappush(self._lower, -seconds)
        if len(self._lower) > len(self._upper) + 1:  # the lower half holds the middle one, if odd
            heapq.heappush(self._upper, -heapq.heappop(self._lower))
        elif len(self._upper) > len(self._lower):
            heapq.heappush(self._lower, -heapq.heappop(self._upper))

    def extend(self, seconds: Iterable[float]) -> None:
        for s in seconds:
            self.append(s)

    @property
    def median_s(self) -> float:
        """As ``statistics.median`` says of them; NaN of none."""
        if not self:
            return math.nan
        if len(self._lower) > len(self._upper):
            return -self._lower[0]
        return (-self._lower[0] + self._upper[0]) / 2
