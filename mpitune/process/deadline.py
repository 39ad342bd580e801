"""How long one configuration may take before its rank's supervisor ends it as a timeout: the one
rule, which the supervised worker (isolation.py) applies to each configuration and rank 0 adds to
each batch's deadline (scheduling/faults/deadlines.py), so that a configuration that hangs until
its own timeout is not mistaken for a lost rank.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

# Without a timeout in the spec: this many times the median time of a configuration so far,
# and never less than the floor (the first configurations also warm up compilers and caches).
TIMEOUT_FACTOR = 20
TIMEOUT_FLOOR_S = 30.0
# ... and never less than this per timed launch asked: the floor alone suits the few launches of
# Kernel Tuner's default (7), but a healthy configuration of 10^5 launches of a 0.3 ms kernel
# takes 30 s, and the first ones have no median to go by (nor do they ever, if all time out).
LAUNCH_ALLOWANCE_S = 1e-3


def config_limit_s(timeout_s: float | None, config_s: Sequence[float], iterations: int = 1) -> float:
    """The spec's ``timeout_s``, else ``TIMEOUT_FACTOR`` times the median of ``config_s`` (how
    long the configurations measured so far took), at least ``config_floor_s(iterations)``."""
    if timeout_s is not None:
        return timeout_s
    if not config_s:
        return config_floor_s(iterations)
    return max(config_floor_s(iterations), TIMEOUT_FACTOR * _median(config_s))


def config_floor_s(iterations: int) -> float:
    """The least a configuration of ``iterations`` timed launches is given:
    ``TIMEOUT_FLOOR_S``, or ``LAUNCH_ALLOWANCE_S`` per launch where that is more (beyond 30,000
    launches: 100 s at 10^5, 1,000 s at the most a spec may ask, 10^6)."""
    return max(TIMEOUT_FLOOR_S, iterations * LAUNCH_ALLOWANCE_S)


def _median(values: Sequence[float]) -> float:
    """``statistics.median`` of ``values``, by partitioning rather than sorting: rank 0 asks for
    the median of every configuration measured so far at each hand-out, and sorting that
    growing list each time made its cost per configuration grow with the run."""
    if len(values) < 64:
        return statistics.median(values)
    array = np.asarray(values, dtype=np.float64)
    n, half = len(array), len(array) // 2
    if not np.isfinite(array).all():
        return statistics.median(values)  # NaN or inf among them: as statistics orders them
    middle = np.partition(array, [half - 1, half])
    return float(middle[half]) if n % 2 else (float(middle[half - 1]) + float(middle[half])) / 2
