"""The running median behind the per-configuration limit: the median statistics gives, at a cost
per configuration that does not grow with the run (comparisons counted, not time)."""

from __future__ import annotations

import math
import statistics

import numpy as np

from mpitune.process.deadline import TIMEOUT_FACTOR, Durations, config_limit_s


class Counted(float):
    """A duration that counts the comparisons made of it, as the heaps make them."""

    compared = 0

    def __lt__(self, other: object) -> bool:
        Counted.compared += 1
        return float(self) < float(other)  # type: ignore[arg-type]

    def __gt__(self, other: object) -> bool:
        Counted.compared += 1
        return float(self) > float(other)  # type: ignore[arg-type]

    def __neg__(self) -> Counted:  # the lower half is kept negated: still counted
        return Counted(-float(self))


def test_the_median_is_statistics_median_after_every_configuration():
    rng = np.random.default_rng(0)
    seconds = [*rng.lognormal(0.0, 1.0, 300).tolist(), 5.0, 5.0, 5.0, math.inf]
    durations = Durations()
    for n, s in enumerate(seconds, 1):
        durations.append(s)
        assert len(durations) == n
        assert durations.median_s == statistics.median(seconds[:n])


def test_a_nan_duration_is_left_out_and_none_has_no_median():
    durations = Durations([math.nan])
    assert len(durations) == 0 and math.isnan(durations.median_s)
    durations.extend([3.0, math.nan, 1.0])
    assert len(durations) == 2 and durations.median_s == 2.0


def test_the_limit_takes_the_running_median_or_a_list():
    assert config_limit_s(None, Durations([10.0, 20.0, 30.0, 1000.0])) == TIMEOUT_FACTOR * 25.0
    assert config_limit_s(None, [10.0, 20.0, 30.0, 1000.0]) == TIMEOUT_FACTOR * 25.0


def test_adding_one_costs_log_n_comparisons_however_many_came_before():
    """A sort or partition of all durations per hand-out made rank 0's cost per configuration grow
    with the run; the heaps make O(log n) comparisons per configuration and none to ask."""
    rng = np.random.default_rng(1)
    durations = Durations()
    per_block = []
    for _ in range(4):
        Counted.compared = 0
        for s in rng.lognormal(0.0, 1.0, 25_000):
            durations.append(Counted(s))
            assert durations.median_s > 0
        per_block.append(Counted.compared / 25_000)
    n = len(durations)
    assert max(per_block) <= 4 * math.log2(n) + 4, per_block
    assert per_block[-1] <= 1.5 * per_block[1], per_block  # the last 25,000 cost as the second did
