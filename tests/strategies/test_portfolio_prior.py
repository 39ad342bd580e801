"""The default (``portfolio``) given a prior: once the design's results agree with the prior's order
it starts from the prior's diverse best, follows the prior as far as the measurements trust it,
drops it where they disagree, and without a prior asks
exactly what it asked before priors existed. Replays of issue 30's shared pairs with fixed seeds."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from search_problems import LANDSCAPE, landscape_ms, result, run, run_pipelined

from mpitune import strategies
from mpitune.model.prior import Prior, PriorSource
from mpitune.strategies import surrogate

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def bench():
    """benchmarks/strategies.py (its replay of the scheduler's pipeline) and benchmarks/priors.py
    (the shared pairs, and the prior each target gets from the other cache)."""
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("benchmark_strategies", BENCHMARKS / "strategies.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]
    sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def priors(bench):
    """benchmarks/priors.py, which benchmarks/strategies.py imports."""
    return sys.modules["priors"]


@pytest.fixture(scope="module")
def data(shared_caches: Path) -> Path:
    """The shared data folder: the pairs span caches/ and validation/."""
    if not (shared_caches.parent / "validation").is_dir():
        pytest.skip("the shared validation caches are not beside this checkout")
    return shared_caches.parent


def scores(bench, priors, data: Path, source: str, target: str, budget: int, mislead=False) -> tuple[float, float]:
    """Mean score at ``budget`` over ``SEEDS`` of the default on 8 simulated ranks, two batches in
    flight, with the other cache as prior (its order reversed when ``mislead``) and without."""
    cache = bench.Replay.load(str(data / f"{target}.json.gz"))
    prior = priors.load_prior(str(data / f"{source}.json.gz"), cache.space)
    if mislead:
        prior = priors.reversed_prior(prior.time_ms[0])
    means = []
    for given in (prior, None):
        runs = [bench.replay(cache, "portfolio", seed, [budget], 8, 2, given) for seed in SEEDS]
        means.append(float(np.mean([r.scores[budget] for r in runs])))
    return means[0], means[1]


def landscape_prior(time_ms: np.ndarray) -> Prior:
    return Prior((PriorSource("test", "k", "elsewhere", "", tuple(LANDSCAPE.names), 0),), (time_ms,))


def test_a_prior_from_another_gpu_finds_the_best_configurations_sooner(bench, priors, data):
    with_prior, without = scores(bench, priors, data, "caches/convolution_A100", "caches/convolution_A4000", 50)
    assert with_prior >= 0.97 and with_prior > without + 0.03, (with_prior, without)
    with_prior, without = scores(bench, priors, data, "validation/pnpoly_RTX_3060_laptop", "caches/pnpoly_RTX_3090", 20)
    assert with_prior >= 0.97 and with_prior > without + 0.1, (with_prior, without)


@pytest.mark.parametrize(
    ("source", "target", "mislead"),
    [
        # another GPU whose order is reversed: the prior points at the worst configurations
        ("validation/pnpoly_RTX_3060_laptop", "caches/pnpoly_RTX_3090", True),
        # another vendor: the MI50's order of the configurations both share barely agrees
        ("validation/convolution_MI50", "validation/convolution_RTX_3090", False),
    ],
)
def test_a_prior_that_misleads_costs_little(bench, priors, data, source, target, mislead):
    with_prior, without = scores(bench, priors, data, source, target, 100, mislead)
    assert with_prior >= without - 0.05, (with_prior, without)


def test_the_trust_falls_to_zero_once_the_measurements_contradict_the_prior():
    true_ms = np.array([landscape_ms(i) for i in range(len(LANDSCAPE))])
    reversed_ms = np.where(np.isfinite(true_ms), 1.0 / true_ms, np.nan)
    trusted = strategies.create("portfolio", LANDSCAPE, 0, {}, prior=landscape_prior(true_ms))
    misled = strategies.create("portfolio", LANDSCAPE, 0, {}, prior=landscape_prior(reversed_ms))
    design = trusted.ask(8)
    trusted.tell([result(i, landscape_ms(i)) for i in design])
    first = trusted.ask(8)  # the first model batch: the prior passed the rank test on the design
    trusted.tell([result(i, landscape_ms(i)) for i in first])
    for strategy in (trusted, misled):
        run_pipelined(strategy, 8, 32 - len(strategy.values), landscape_ms)
    assert trusted.use.agreed and trusted.use.trusted and trusted.use.beta[0] > 0.3
    assert misled.use.agreed is False and not misled.use.trusted  # the model is then the one without a prior
    # The first model batch starts with the prior's best, spread out: no two closer than two parameters.
    picks = first[: surrogate.PRIOR_FIRST]
    assert picks[0] == int(np.nanargmin(true_ms)) and picks == trusted.use.diverse_best(set(design), len(picks))
    for a in picks:
        for b in picks:
            assert a == b or (LANDSCAPE.indices[a] != LANDSCAPE.indices[b]).sum() >= surrogate.PRIOR_DIVERSITY


def test_configurations_the_prior_does_not_know_stay_reachable():
    true_ms = np.array([landscape_ms(i) for i in range(len(LANDSCAPE))])
    known = LANDSCAPE.indices[:, 4] == 0  # the prior never had shared = 1 or 2
    strategy = strategies.create(
        "portfolio", LANDSCAPE, 0, {}, prior=landscape_prior(np.where(known, true_ms, math.nan))
    )
    asked = run(strategy, 8, 120, landscape_ms)
    assert (~known[asked]).sum() >= 40  # unknown is not taken for bad
    rest = run(strategy, 64, len(LANDSCAPE), landscape_ms)
    assert sorted(asked + rest) == list(range(len(LANDSCAPE)))


def test_without_a_prior_the_default_asks_what_it_asked_before_priors(bench, shared_caches):
    """Recorded from the portfolio before priors existed (d8a74e1): pnpoly on an RTX 3090, seed 0,
    8 ranks, two batches in flight."""
    cache = bench.Replay.load(str(shared_caches / "pnpoly_RTX_3090.json.gz"))
    strategy = strategies.create("portfolio", cache.space, 0, {})
    batches: list[list[int]] = []
    for b in range(5):
        if b >= 2:
            strategy.tell([cache.result(i) for i in batches[b - 2]])
        batches.append(strategy.ask(8))
    assert batches == [
        [238, 3915, 3203, 2016, 919, 2600, 3250, 257],
        [4026, 2939, 1299, 1753, 2866, 735, 58, 833],
        [251, 260, 719, 3092, 4075, 26, 3120, 3083],
        [255, 242, 3127, 3108, 4023, 81, 3134, 996],
        [254, 3320, 29, 3969, 791, 51, 1016, 974],
    ]


def test_the_same_prior_seed_and_results_give_the_same_search():
    """What a resumed run relies on: it rebuilds the strategy from its seed, options, prior and
    the results recorded, and checks that it asks what the file says it asked."""
    true_ms = np.array([landscape_ms(i) for i in range(len(LANDSCAPE))])
    searches = [
        run_pipelined(
            strategies.create("portfolio", LANDSCAPE, 3, {}, prior=landscape_prior(true_ms)), 8, 48, landscape_ms
        )
        for _ in range(2)
    ]
    assert searches[0] == searches[1]
    without = run_pipelined(strategies.create("portfolio", LANDSCAPE, 3, {}), 8, 48, landscape_ms)
    assert searches[0][:16] == without[:16]  # the design, asked before the prior is judged
    assert searches[0] != without  # then the prior, which passed the rank test, did change the search
