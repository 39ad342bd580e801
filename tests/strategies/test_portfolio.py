"""What portfolio adds to the contract: the model and the genetic algorithm share the batches,
the breeder evolves apart from the model's picks until ``breed_after`` results and then breeds
from everything, the model stops at ``switch``, and the
surrogate learns which parameters matter and where configurations fail. Its process (``noise``,
``smoothness``) and the length of its design (``design``) are options whose defaults ask what the
portfolio asked before they were."""

import math

import numpy as np
import pytest
from search_problems import LANDSCAPE, TINY, landscape_ms, make, run, run_pipelined

from mpitune import strategies
from mpitune.strategies import surrogate

DEFAULT = surrogate.Covariance(smoothness=2.5, noise=1e-2)  # the process before these were options


def test_after_the_design_the_model_and_the_breeder_share_each_batch():
    strategy = make("portfolio", model_share=0.5)
    run(strategy, 8, 8, landscape_ms)
    batch = strategy.ask(8)
    assert len(batch) == 8 and len(set(batch) & strategy.modelled) == 4
    assert set(batch) <= strategy.breeder.seen  # neither part can propose the other's ids again


def test_the_breeder_is_not_told_the_model_s_picks_so_its_population_stays_diverse():
    strategy = make("portfolio")
    run(strategy, 8, 64, landscape_ms)
    assert strategy.modelled and not strategy.modelled & set(strategy.breeder.values)
    assert len(strategy.values) == 64


def test_the_model_stops_at_switch():
    strategy = make("portfolio", switch=24)
    run(strategy, 8, 24, landscape_ms)
    modelled = set(strategy.modelled)
    run(strategy, 8, 16, landscape_ms)
    assert strategy.modelled == modelled


def test_from_breed_after_on_the_breeder_knows_everything_and_proposes_a_share_of_each_batch():
    strategy = make("portfolio", breed_after=24)
    run(strategy, 8, 24, landscape_ms)
    assert not strategy.joined and not strategy.modelled & set(strategy.breeder.values)
    batch = strategy.ask(8)
    assert strategy.joined and len(batch) == 8
    assert len(set(batch) & strategy.modelled) == 6  # the breeder proposes int(8 * 0.25) = 2
    # Told the model's results too, so that it breeds from the best found.
    assert set(strategy.values) <= set(strategy.breeder.values)
    assert strategy.best(1)[0] in strategy.breeder.best(20)
    run(strategy, 8, 16, landscape_ms)
    assert set(strategy.values) - set(batch) <= set(strategy.breeder.values)


def test_the_length_scales_are_short_where_the_parameter_matters():
    rng = np.random.default_rng(0)
    x = rng.random((60, 2))
    y = np.sin(6 * x[:, 0])  # only the first parameter matters
    scales = surrogate.fit_scales(x, (y - y.mean()) / y.std(), DEFAULT)
    assert scales[0] < scales[1] / 4, scales


def test_the_failure_estimate_is_high_in_a_failing_region_and_zero_without_failures():
    x = np.array([[0.0], [0.1], [0.9], [1.0]])
    failed = np.array([False, False, True, True])
    rate = surrogate.failure_rate(x, failed, np.array([[0.05], [0.95]]), np.array([0.2]), DEFAULT)
    assert rate[1] > 0.6 > 0.4 > rate[0], rate
    assert not surrogate.failure_rate(x, np.zeros(4, dtype=bool), x, np.array([0.2]), DEFAULT).any()


def test_it_finds_the_landscape_s_valley_sooner_than_the_genetic_algorithm():
    def best(name: str, seed: int) -> float:
        return min(t for t in map(landscape_ms, run(make(name, seed=seed), 8, 40, landscape_ms)) if t == t)

    seeds = range(6)
    assert np.mean([best("portfolio", s) for s in seeds]) < np.mean([best("genetic_algorithm", s) for s in seeds])
    assert len(LANDSCAPE) > 40


def test_the_length_scales_stay_long_enough_for_the_fit_to_be_positive_definite():
    """A parameter that splits the times in two drove its scale towards zero (4e-8 on a
    convolution cache), where the squared distances of ``matern`` lost their precision and
    the Cholesky factorisation of the next fit failed."""
    rng = np.random.default_rng(1)
    x = np.column_stack([rng.integers(0, 2, 240), rng.integers(0, 16, (240, 3)) / 15]).astype(float)
    y = np.where(x[:, 0] > 0, 1.0, -1.0) + x[:, 1] + 0.01 * rng.standard_normal(240)
    tiny = np.array([4e-8, 0.3, 0.3, 0.3])
    with pytest.raises(np.linalg.LinAlgError):
        surrogate.condition(x, y, tiny, DEFAULT)
    scales = surrogate.fit_scales(x, y, DEFAULT, tiny)
    assert scales.min() >= surrogate.MIN_SCALE
    surrogate.condition(x, y, scales, DEFAULT)  # no LinAlgError


def test_the_defaults_are_the_process_and_the_design_of_before():
    """The pinned batches on pnpoly (test_portfolio_prior.py) hold the ids; this holds the values."""
    for name in ("portfolio", "bayes_opt"):
        assert strategies.create(name, LANDSCAPE, 0, {}).covariance == DEFAULT
    assert make("portfolio").design == 8
    d = np.array([0.0, 0.3, 1.0, 2.5])
    r = math.sqrt(5) * d
    assert np.array_equal(DEFAULT.correlation(d), (1 + r + r * r / 3) * np.exp(-r))  # Matern-5/2, bit for bit
    given = {"noise": 0.01, "smoothness": 2.5, "design": 8}
    assert run_pipelined(make("portfolio", **given), 8, 40, landscape_ms) == run_pipelined(
        make("portfolio"), 8, 40, landscape_ms
    )


def test_each_smoothness_is_its_matern_kernel():
    d = np.array([0.0, 0.5, 2.0])
    rough, once, twice = (surrogate.Covariance(nu, 1e-2).correlation(d) for nu in (0.5, 1.5, 2.5))
    assert np.allclose(rough, np.exp(-d))
    assert np.allclose(once, (1 + math.sqrt(3) * d) * np.exp(-math.sqrt(3) * d))
    assert rough[0] == once[0] == twice[0] == 1.0
    assert rough[1] < once[1] < twice[1]  # near, a smoother process correlates more


@pytest.mark.parametrize("option", [{"noise": 0.3}, {"smoothness": 0.5}, {"smoothness": 1.5}])
def test_another_process_asks_other_configurations(option):
    default = run_pipelined(make("portfolio"), 8, 48, landscape_ms)
    other = run_pipelined(make("portfolio", **option), 8, 48, landscape_ms)
    assert other[:8] == default[:8]  # the shared design
    assert other != default


def test_the_model_takes_over_after_design_results():
    longer = make("portfolio", design=16)
    asked = run(longer, 8, 16, landscape_ms)
    assert not longer.modelled  # two batches of the design
    assert asked[:8] == run(make("portfolio"), 8, 8, landscape_ms)  # the same design, only longer
    default = make("portfolio")
    run(default, 8, 16, landscape_ms)
    assert len(default.modelled) == 8
    assert set(longer.ask(8)) <= longer.modelled  # then the model


@pytest.mark.parametrize("name", ["portfolio", "bayes_opt"])
def test_a_smoothness_without_its_kernel_is_refused_in_one_line(name):
    message = rf"^strategy '{name}': smoothness must be one of 0\.5, 1\.5, 2\.5, got 2$"
    with pytest.raises(ValueError, match=message):
        strategies.translate(name, {"smoothness": 2})  # when the spec is read, before anything runs
    with pytest.raises(ValueError, match=message):
        strategies.create(name, TINY, 0, {"smoothness": 2})
    with pytest.raises(ValueError, match=r"^smoothness must be one of 0\.5, 1\.5, 2\.5, got 1\.0$"):
        surrogate.Covariance(smoothness=1.0, noise=1e-2)  # a strategy built without create
