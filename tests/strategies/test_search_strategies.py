"""Every search strategy against the ask/tell contract, failures, resumes, and a landscape
on which it must beat random sampling."""

import math
import pickle

import numpy as np
import pytest

from mpitune import strategies
from mpitune.model.restrictions import Restriction
from mpitune.model.result import Result
from mpitune.model.searchspace import SearchSpace

SEARCHERS = ["bayes_opt", "differential_evolution", "genetic_algorithm", "greedy_ils", "pso",
             "simulated_annealing"]
TINY = SearchSpace.build({"a": [1, 2, 3, 4], "b": [1, 2, 3]}, [Restriction("a + b != 5", ["a", "b"])])
# Small enough options that the populations, swarms and initial designs fit the tiny space.
SMALL = {"bayes_opt": {"initial_samples": 4}, "differential_evolution": {"population": 4},
         "genetic_algorithm": {"population": 4}, "pso": {"swarm_size": 4}}

LANDSCAPE_PARAMS = {"bx": [16, 32, 64, 128, 256, 512, 1024, 2048], "by": [1, 2, 4, 8, 16, 32, 64, 128],
                    "tile": [1, 2, 3, 4, 5, 6], "unroll": [0, 1, 2, 3], "shared": [0, 1, 2]}
LANDSCAPE = SearchSpace.build(LANDSCAPE_PARAMS, [Restriction("bx * by <= 32768", list(LANDSCAPE_PARAMS))])


def landscape_ms(config_id: int) -> float:
    """A kernel-like landscape: a smooth valley with interacting parameters, a deterministic
    rugged term, and a failing corner (too many threads with big tiles); NaN = failure."""
    x = LANDSCAPE.indices[config_id].astype(float)
    if x[0] + x[1] >= 11 and x[2] >= 3:
        return math.nan
    valley = (x[0] - 4.6) ** 2 + 0.7 * (x[1] - 2.3) ** 2 + 0.8 * (x[2] - 3.4) ** 2 + 0.3 * (x[0] - x[1] - 2) ** 2
    rugged = 0.2 * math.sin(7.0 * config_id) + 0.6 * (x[3] - 2) ** 2 + 0.5 * (x[4] == 1)
    return 1.0 + valley + rugged


def result(config_id: int, ms: float) -> Result:
    """Scored as rank 0 scores a time objective: the time, inf for a failure."""
    ok = math.isfinite(ms)
    return Result(config_id, "ok" if ok else "runtime_error", time_ms=ms, score=ms if ok else math.inf)


def run(strategy, n: int, budget: int, measure) -> list[int]:
    out: list[int] = []
    while len(out) < budget and (batch := strategy.ask(min(n, budget - len(out)))):
        assert len(batch) <= n
        out.extend(batch)
        strategy.tell([result(i, measure(i)) for i in batch])
    return out


def make(name, space=LANDSCAPE, seed=0, **options):
    return strategies.create(name, space, seed, {**(SMALL.get(name, {}) if space is TINY else {}), **options})


def test_all_searchers_are_registered():
    assert set(SEARCHERS) <= set(strategies.available())


@pytest.mark.parametrize("n", [1, 3, 8])
@pytest.mark.parametrize("name", SEARCHERS)
def test_drains_a_tiny_space_without_repeating(name, n):
    got = run(make(name, TINY), n, 10**6, lambda i: float(i % 5 + 1))
    assert sorted(got) == list(range(len(TINY)))
    assert make(name, TINY).ask(0) == []


@pytest.mark.parametrize("name", SEARCHERS)
def test_same_seed_same_search_and_another_seed_another(name):
    def measure(i):
        return landscape_ms(i)
    a = run(make(name, seed=3), 4, 80, measure)
    assert a == run(make(name, seed=3), 4, 80, measure)
    assert a != run(make(name, seed=4), 4, 80, measure)
    assert len(set(a)) == len(a) == 80


@pytest.mark.parametrize("name", SEARCHERS)
def test_failures_steer_but_do_not_stop_the_search(name):
    half = run(make(name), 5, 120, lambda i: math.nan if i % 2 else landscape_ms(i))
    assert len(set(half)) == len(half) == 120
    nothing = run(make(name), 5, 60, lambda i: math.nan)
    assert len(set(nothing)) == len(nothing) == 60


@pytest.mark.parametrize("name", SEARCHERS)
def test_results_it_never_asked_for_are_learned_and_never_proposed(name):
    strategy = make(name)
    known = list(np.random.default_rng(0).choice(len(LANDSCAPE), 40, replace=False))
    strategy.tell([result(int(i), landscape_ms(int(i))) for i in known])
    got = run(strategy, 6, 90, landscape_ms)
    assert len(got) == 90 and not set(got) & set(known) and len(set(got)) == 90


@pytest.mark.parametrize("name", SEARCHERS)
def test_a_pickled_search_continues_identically(name):
    strategy = make(name, seed=1)
    run(strategy, 4, 40, landscape_ms)
    copy = pickle.loads(pickle.dumps(strategy))
    assert run(strategy, 4, 40, landscape_ms) == run(copy, 4, 40, landscape_ms)


@pytest.mark.parametrize("name, option, value", [
    ("genetic_algorithm", "population", 1), ("genetic_algorithm", "mutation_rate", 1.5),
    ("differential_evolution", "crossover_rate", -0.1), ("differential_evolution", "population", 2.5),
    ("pso", "swarm_size", 0), ("pso", "inertia", "fast"), ("simulated_annealing", "cooling", 1.5),
    ("greedy_ils", "perturbation", 0), ("bayes_opt", "candidates", 0), ("bayes_opt", "initial_samples", True)])
def test_bad_options_name_the_option(name, option, value):
    with pytest.raises(ValueError, match=f"{name}.*{option}"):
        strategies.create(name, LANDSCAPE, 0, {option: value})


def best_found(name: str, seed: int, budget: int = 100, n: int = 4) -> float:
    ids = run(strategies.create(name, LANDSCAPE, seed, {}), n, budget, landscape_ms)
    return min(t for t in map(landscape_ms, ids) if math.isfinite(t))


@pytest.mark.parametrize("name", SEARCHERS)
def test_beats_random_sampling_on_a_kernel_like_landscape(name):
    seeds = range(8)
    random = np.mean([best_found("random_sample", s) for s in seeds])
    found = np.mean([best_found(name, s) for s in seeds])
    optimum = min(t for t in map(landscape_ms, range(len(LANDSCAPE))) if math.isfinite(t))
    # At least a quarter of the way from random sampling's result to the optimum.
    assert found - optimum < 0.75 * (random - optimum), (found, random, optimum)


def flat(config_id: int) -> float:
    return 1.0  # nothing ever improves: every population and chain stagnates


def test_differential_evolution_restarts_a_stagnant_population_with_random_members():
    strategy = make("differential_evolution", population=6, patience=1)
    run(strategy, 3, 9, flat)  # the random population, then a first batch of trials
    first = list(strategy.members)
    assert len(first) == 6
    for _ in range(10):  # a generation of trials without improving the best: restart
        run(strategy, 3, 3, flat)
        if len(strategy.members) == 1:
            break
    assert len(strategy.members) == 1 and strategy.members[0] in first  # the best stays
    run(strategy, 3, 6, flat)  # the rest of the population is drawn anew at random
    assert len(strategy.members) == 6 and len(set(strategy.members) - set(first)) == 5


def test_pso_restarts_a_particle_whose_best_stopped_improving():
    strategy = make("pso", swarm_size=4, patience=2)
    run(strategy, 4, 4 * 4, flat)
    assert strategy.stale.max() < 2  # every particle was restarted and counts again from zero


def test_simulated_annealing_restarts_a_stagnant_chain():
    strategy = make("simulated_annealing", patience=3)
    run(strategy, 2, 40, flat)
    assert all(c.restarts >= 2 for c in strategy.chains)


def test_annealing_temperature_follows_the_spread_of_the_times():
    narrow, wide = make("simulated_annealing"), make("simulated_annealing")
    run(narrow, 4, 40, lambda i: 1.0 + 0.01 * (i % 7))
    run(wide, 4, 40, lambda i: 1.0 + 10.0 * (i % 7))
    assert wide.temperature(wide.chains[0]) > 10 * narrow.temperature(narrow.chains[0])


@pytest.mark.parametrize("name", SEARCHERS)
def test_every_searcher_starts_with_the_shared_space_filling_design(name):
    batch = make(name).ask(8)
    assert batch == make("greedy_ils").ask(8)  # one design, not one neighbourhood


def spread(ids) -> float:
    coords = LANDSCAPE.unit_coordinates(np.asarray(ids))
    dist = ((coords[:, None, :] - coords[None, :, :]) ** 2).sum(-1)
    return float(dist[~np.eye(len(ids), dtype=bool)].min())


def test_the_design_spreads_wider_than_random_sampling_and_avoids_what_is_seen():
    seeds = range(20)
    design = np.mean([spread(make("genetic_algorithm", seed=s).ask(8)) for s in seeds])
    random = np.mean([spread(make("random_sample", seed=s).ask(8)) for s in seeds])
    assert design > 1.5 * random, (design, random)
    strategy = make("genetic_algorithm")
    known = list(range(0, len(LANDSCAPE), 3))
    strategy.tell([result(i, 1.0) for i in known])
    batch = strategy.ask(8)
    assert len(set(batch)) == 8 and not set(batch) & set(known)


def test_greedy_ils_spends_its_exploration_share_on_random_configurations():
    strategy = make("greedy_ils", exploration=0.25)
    run(strategy, 8, 8, landscape_ms)
    batch = strategy.ask(8)
    current = strategy.current
    near = set(LANDSCAPE.neighbours(current).tolist()) | {current}
    assert sum(i not in near for i in batch) >= 2


def test_bayes_opt_fits_its_model_from_the_second_batch():
    name = "bayes_opt"
    searching, designing = make(name), make(name)
    for strategy in (searching, designing):
        run(strategy, 8, 8, landscape_ms)  # one batch of the design, populations of 20
    assert searching.ask(8) != designing.space_filling(8)  # the second batch already uses the first


def test_annealing_chains_in_the_worse_half_restart_from_the_best_of_the_design():
    strategy = make("simulated_annealing")
    run(strategy, 8, 8, landscape_ms)
    top = set(strategy.best(2))
    batch = strategy.ask(8)
    near = {int(i) for t in top for i in LANDSCAPE.neighbours(t)}
    assert sum(i in near for i in batch) >= 4


@pytest.mark.parametrize("name", SEARCHERS + ["brute_force", "random_sample"])
def test_an_unscored_result_is_refused(name):
    """Strategies minimise the score rank 0 computes; a result told without one is a bug."""
    strategy = make(name, TINY)
    batch = strategy.ask(2)
    with pytest.raises(ValueError, match="before it was scored"):
        strategy.tell([Result(batch[0], "ok", time_ms=1.0)])
