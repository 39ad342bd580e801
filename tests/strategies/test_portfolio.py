"""What portfolio adds to the contract: the model and the genetic algorithm share the batches,
the breeder evolves apart from the model's picks until ``breed_after`` results and then breeds
from everything, the model stops at ``switch``, and the
surrogate learns which parameters matter and where configurations fail."""

import numpy as np
import pytest
from search_problems import LANDSCAPE, landscape_ms, make, run

from mpitune.strategies import surrogate


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
    scales = surrogate.fit_scales(x, (y - y.mean()) / y.std())
    assert scales[0] < scales[1] / 4, scales


def test_the_failure_estimate_is_high_in_a_failing_region_and_zero_without_failures():
    x = np.array([[0.0], [0.1], [0.9], [1.0]])
    failed = np.array([False, False, True, True])
    rate = surrogate.failure_rate(x, failed, np.array([[0.05], [0.95]]), np.array([0.2]))
    assert rate[1] > 0.6 > 0.4 > rate[0], rate
    assert not surrogate.failure_rate(x, np.zeros(4, dtype=bool), x, np.array([0.2])).any()


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
        surrogate.condition(x, y, tiny)
    scales = surrogate.fit_scales(x, y, tiny)
    assert scales.min() >= surrogate.MIN_SCALE
    surrogate.condition(x, y, scales)  # no LinAlgError
