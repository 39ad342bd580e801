"""A prior that never hurts: the default (``portfolio``) uses a prior only once the order of the
design's results agrees with the prior's (Kendall's tau above ``surrogate.PRIOR_TEST_TAU`` over at
least ``surrogate.PRIOR_TEST_MIN`` results the prior knows). Until then, and for good once the
test drops the prior, it asks exactly the ids the search without a prior asks."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from search_problems import LANDSCAPE, landscape_ms, run_pipelined

from mpitune import strategies
from mpitune.model.prior import Prior, PriorSource
from mpitune.model.searchspace import SearchSpace
from mpitune.store import measured
from mpitune.strategies import surrogate

TRUE_MS = np.array([landscape_ms(i) for i in range(len(LANDSCAPE))])


def prior_of(time_ms: np.ndarray) -> Prior:
    return Prior((PriorSource("test", "k", "elsewhere", "", tuple(LANDSCAPE.names), 0),), (time_ms,))


def search(seed: int, prior: Prior | None, budget: int = 100) -> tuple[list[int], surrogate.PriorUse | None]:
    strategy = strategies.create("portfolio", LANDSCAPE, seed, {}, prior=prior)
    return run_pipelined(strategy, 8, budget, landscape_ms), strategy.use


def test_kendall_tau():
    a = np.array([1.0, 2.0, 3.0, 4.0])
    assert surrogate.kendall_tau(a, a * 10) == 1.0
    assert surrogate.kendall_tau(a, -a) == -1.0
    assert surrogate.kendall_tau(a, np.array([1.0, 3.0, 2.0, 4.0])) == pytest.approx(4 / 6)
    assert surrogate.kendall_tau(a, np.ones(4)) == 0.0  # ties count as neither
    assert surrogate.kendall_tau(a[:1], a[:1]) == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_reversed_prior_is_dropped_after_the_design_and_changes_nothing(seed):
    reversed_ms = np.where(np.isfinite(TRUE_MS), 1.0 / TRUE_MS, np.nan)
    asked, use = search(seed, prior_of(reversed_ms))
    assert use is not None and use.agreed is False and use.tau < 0 and not use.trusted
    assert asked == search(seed, None)[0]


def test_a_good_prior_passes_the_test_on_the_design_and_changes_the_search():
    asked, use = search(0, prior_of(TRUE_MS), 32)
    without = search(0, None, 32)[0]
    assert use is not None and use.agreed and use.tau > 0.5
    assert asked[:16] == without[:16]  # the design, asked before any result is told
    picks = asked[16 : 16 + surrogate.PRIOR_FIRST]  # then the prior's diverse best, of what is unseen
    unseen_ms = TRUE_MS.copy()
    unseen_ms[asked[:16]] = np.nan
    assert picks[0] == int(np.nanargmin(unseen_ms)) and picks == use.diverse_best(set(asked[:16]), len(picks))


def test_until_the_test_can_judge_the_prior_the_search_is_the_one_without():
    """A prior that knows too few configurations is never judged: it changes nothing."""
    few = np.full(len(LANDSCAPE), math.nan)
    known = np.flatnonzero(np.isfinite(TRUE_MS))[: surrogate.PRIOR_TEST_MIN - 1]
    few[known] = TRUE_MS[known]
    asked, use = search(0, prior_of(few), 64)
    assert use is not None and use.agreed is None
    assert asked == search(0, None, 64)[0]


def test_a_reversed_prior_on_a_real_cache_changes_nothing(shared_caches):
    """convolution on an A100, given the A4000's times reversed (both in caches/): the worst
    configurations first. The design's order contradicts it, so the search is the one without."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import priors  # benchmarks/priors.py: the prior a run given --prior builds
    finally:
        sys.path.pop(0)
    data = measured.load(str(shared_caches / "convolution_A100.json.gz"))
    space = SearchSpace.from_configs(data.tune_params, data.configs)
    by_config = data.lookup()
    time_ms = np.array(
        [
            m.time_ms if m.status == "ok" else np.nan
            for m in (by_config[tuple(space.config(i).values())] for i in range(len(space)))
        ]
    )
    prior = priors.reversed_prior(priors.load_prior(str(shared_caches / "convolution_A4000.json.gz"), space).time_ms[0])

    def measure(i: int) -> float:
        return float(time_ms[i])

    for seed in (0, 1):
        misled = strategies.create("portfolio", space, seed, {}, prior=prior)
        asked = run_pipelined(misled, 8, 100, measure)
        assert misled.use.agreed is False
        assert asked == run_pipelined(strategies.create("portfolio", space, seed, {}), 8, 100, measure)
