"""Which candidates confirmation times again, chosen from search results: the order-statistic
interval of a median and the candidates the search cannot tell from its best."""

from __future__ import annotations

import math

import numpy as np

from mpitune.model.judging.candidates import NEAR_BOUND, candidates, search_interval_ms
from mpitune.model.result import Scored, Status


def test_the_search_interval_is_the_order_statistic_one():
    times = [5.0, 1.0, 3.0, 7.0, 2.0, 6.0, 4.0]
    assert search_interval_ms(times) == (1.0, 7.0)  # 7 launches: [min, max] covers 98.4 %, [2nd, 6th] 87.5 %
    assert search_interval_ms(times, confidence=0.8) == (2.0, 6.0)
    assert search_interval_ms([2.0, 1.0]) == (1.0, 2.0)  # too few for 95 %: [min, max] all the same
    assert search_interval_ms([2.0, 1.0, math.nan], confidence=0.1) == (1.0, 2.0)
    nine = [float(t) for t in range(9, 0, -1)]
    assert search_interval_ms(nine, confidence=0.9) == (2.0, 8.0)  # [3rd, 7th] would cover only 82 %
    assert search_interval_ms([float(t) for t in range(1, 21)]) == (6.0, 15.0)  # the textbook ranks for 20
    assert all(math.isnan(x) for x in search_interval_ms([]))


def test_the_search_interval_covers_the_median_as_often_as_it_says():
    rng = np.random.default_rng(11)
    draws = np.exp(0.3 * rng.standard_normal((4000, 15)))  # lognormal: skewed, median 1
    covered = [lo <= 1.0 <= hi for lo, hi in (search_interval_ms(list(d)) for d in draws)]
    assert 0.95 <= np.mean(covered) <= 0.99  # exact coverage for 15 launches: 96.5 %


def scored(config_id, times, status=Status.OK, raced=False, first_ms=math.nan, rank=-1):
    return Scored(
        config_id=config_id,
        status=status,
        time_ms=float(np.median(times)) if len(times) else math.nan,
        times_ms=tuple(times),
        raced=raced,
        first_ms=first_ms,
        rank=rank,
    )


def test_candidates_are_the_k_best_and_those_the_search_cannot_tell_from_the_best():
    rng = np.random.default_rng(12)
    spread = [tuple(m * np.exp(0.001 * rng.standard_normal(7))) for m in (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6)]
    results = [scored(i, spread[i]) for i in (6, 3, 0, 5, 1, 4, 2)]
    assert candidates(results, k=3) == [0, 1, 2]
    # Raced beyond the race's near bound (1.05 x its floor, 1.1 x the best): known slower, never among the k best.
    far = [scored(10, (1.25,), raced=True), scored(11, (1.26,), raced=True)]
    assert candidates([*(r for r in results if r.config_id < 3), *far], k=5) == [0, 1, 2]
    wide = scored(9, (0.99, 1.0, 2.0, 2.1, 2.2, 2.3, 2.4))  # median 2.1, but its interval reaches the best
    assert candidates([*results, wide], k=3) == [0, 1, 2, 9]
    # One fast launch of seven is no reason: the 84 % interval of seven launches leaves out the extremes.
    outlier = scored(9, (0.99, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4))
    assert candidates([*results, outlier], k=3) == [0, 1, 2]
    assert candidates([*results, wide], k=3, most=2) == [0, 1]


def test_candidates_ignore_failures_and_take_raced_ones_far_from_the_bound_only_through_their_interval():
    results = [
        scored(0, (1.0, 1.01, 0.99, 1.0, 1.02)),
        scored(1, (1.1, 1.11, 1.09, 1.1, 1.12)),  # within the near bound (1.05 x 1.1 x the best)
        scored(2, (), status=Status.COMPILE_ERROR),
        scored(3, (0.5, 0.5, 0.5), status=Status.VERIFY_FAILED),
        scored(4, (math.inf,)),
        scored(5, (1.5, 1.6), raced=True),  # few launches, none near the best: out
        scored(6, (1.3, 1.005), raced=True),  # its wide interval reaches the best: in
    ]
    assert candidates(results, k=2) == [0, 1, 6]  # best first: 1's median (1.1) is below 6's (1.15)
    assert candidates(results, k=4) == [0, 1, 6]  # k counts full results only: 5 never joins
    assert candidates(results, k=1) == [0, 6]
    assert candidates(results[2:5]) == []


def test_raced_candidates_that_stopped_near_the_bound_join_the_nearest_k_of_them():
    """R x the best is racing's floor, 1.1, here (the spreads are small, no first launch is known):
    a raced result within NEAR_BOUND of that joins, the k nearest of them, and farther ones do not."""
    full = [scored(0, (1.0, 1.01, 0.99)), scored(1, (1.05, 1.06, 1.04))]
    assert NEAR_BOUND * 1.1 < 1.3
    stopped = [scored(10 + i, (1.1 + 0.01 * i,), raced=True) for i in range(4)]  # on their first launch
    far = scored(20, (1.3,), raced=True)
    assert candidates([*full, *stopped, far], k=2) == [0, 1, 10, 11]
    assert candidates([*full, *stopped, far], k=5) == [0, 1, 10, 11, 12, 13]
    assert candidates([*full, *stopped, far], k=5, most=3) == [0, 1, 10]  # still capped, best first
    # A first launch colder than the spread widens the bound as it widened the race's: 1.6 x 1.0.
    cold = [scored(0, (1.0, 1.01, 0.99), first_ms=1.6), full[1]]
    assert candidates([*cold, far], k=2) == [0, 1, 20]


def test_candidates_carry_the_calibrations_error_so_a_factor_estimated_high_cannot_drop_the_best():
    """40 configurations 0.1 % apart, each timed 7 times (0.2 % noise) on one of 8 ranks whose
    factors the calibration estimated with a 0.5 % error (as its standard error says): calibrated
    by those factors, the search's intervals alone often leave the true best (0) out; widened by
    the factors' error they keep it, with a handful more candidates, not all of them."""
    rng = np.random.default_rng(5)
    kept, counts, trials = {"raw": 0, "calibrated": 0}, [], 100
    for _ in range(trials):
        error = np.exp(0.005 * rng.standard_normal(8))  # each rank's estimated factor / its true one
        ranks = rng.integers(8, size=40)
        results = [
            scored(i, tuple((1 + 0.001 * i) * np.exp(0.002 * rng.standard_normal(7)) / error[r]), rank=int(r))
            for i, r in enumerate(ranks)
        ]
        kept["raw"] += 0 in candidates(results, k=5)
        ids = candidates(results, k=5, factor_sd={r: 0.005 for r in range(8)})
        kept["calibrated"] += 0 in ids
        counts.append(len(ids))
    assert kept["raw"] <= 0.85 * trials  # 82 of 100 without the factors' error
    assert kept["calibrated"] >= 0.95 * trials  # 98 with it
    assert np.mean(counts) <= 13  # 11.5 on average, of 16 at most
    # A factor known exactly (one rank, or no calibration) changes nothing.
    assert candidates(results, k=5, factor_sd=dict.fromkeys(range(8), 0.0)) == candidates(results, k=5)
