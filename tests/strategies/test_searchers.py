"""What the searchers (every registered strategy but the baselines) promise beyond the
contract: they beat random sampling on a kernel-like landscape, start from the shared
space-filling design, and restart what stagnates."""

import math

import numpy as np
import pytest
from search_problems import LANDSCAPE, SEARCHERS, flat, landscape_ms, make, result, run


def best_found(name: str, seed: int, budget: int = 100, n: int = 4) -> float:
    ids = run(make(name, seed=seed), n, budget, landscape_ms)
    return min(t for t in map(landscape_ms, ids) if math.isfinite(t))


def test_there_are_searchers():
    assert len(SEARCHERS) >= 6


@pytest.mark.parametrize("name", SEARCHERS)
def test_beats_random_sampling_on_a_kernel_like_landscape(name):
    seeds = range(8)
    random = np.mean([best_found("random_sample", s) for s in seeds])
    found = np.mean([best_found(name, s) for s in seeds])
    optimum = min(t for t in map(landscape_ms, range(len(LANDSCAPE))) if math.isfinite(t))
    # At least a quarter of the way from random sampling's result to the optimum.
    assert found - optimum < 0.75 * (random - optimum), (found, random, optimum)


@pytest.mark.parametrize("name", SEARCHERS)
def test_every_searcher_starts_with_the_shared_space_filling_design(name):
    batch = make(name).ask(8)
    assert batch == make("brute_force").space_filling(8)  # one design, not one neighbourhood


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


def test_annealing_chains_in_the_worse_half_restart_from_the_best_of_the_design():
    strategy = make("simulated_annealing")
    run(strategy, 8, 8, landscape_ms)
    top = set(strategy.best(2))
    batch = strategy.ask(8)
    near = {int(i) for t in top for i in LANDSCAPE.neighbours(t)}
    assert sum(i in near for i in batch) >= 4


def test_greedy_ils_spends_its_exploration_share_on_random_configurations():
    strategy = make("greedy_ils", exploration=0.25)
    run(strategy, 8, 8, landscape_ms)
    batch = strategy.ask(8)
    current = strategy.current
    near = set(LANDSCAPE.neighbours(current).tolist()) | {current}
    assert sum(i not in near for i in batch) >= 2


def test_bayes_opt_fits_its_model_from_the_second_batch():
    searching, designing = make("bayes_opt"), make("bayes_opt")
    for strategy in (searching, designing):
        run(strategy, 8, 8, landscape_ms)  # one batch of the design, populations of 20
    assert searching.ask(8) != designing.space_filling(8)  # the second batch already uses the first
