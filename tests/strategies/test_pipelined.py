"""Strategies under the scheduler's pipeline, two batches in flight: batch b is asked once
batch b - 2 is told, so batch b - 1 is out ("in flight") while batch b is chosen. The contract
holds in that order too (nothing repeats, a space drains, the same asks and tells give the
same search: a resumed run replays them so), and the strategies that propose from what they
know treat what is in flight as taken."""

import numpy as np
import pytest
from search_problems import LANDSCAPE, TINY, landscape_ms, make, result, run, run_pipelined

from mpitune import strategies

EVERY = strategies.available()


@pytest.mark.parametrize("n", [1, 3, 8])
@pytest.mark.parametrize("name", EVERY)
def test_drains_a_tiny_space_without_repeating_with_a_batch_in_flight(name, n):
    got = run_pipelined(make(name, TINY), n, 10**6, lambda i: float(i % 5 + 1))
    assert sorted(got) == list(range(len(TINY)))


@pytest.mark.parametrize("name", EVERY)
def test_the_same_interleaving_gives_the_same_search(name):
    a = run_pipelined(make(name, seed=3), 4, 80, landscape_ms)
    assert a == run_pipelined(make(name, seed=3), 4, 80, landscape_ms)
    assert len(set(a)) == len(a) == 80


@pytest.mark.parametrize("name", EVERY)
def test_pending_is_what_was_handed_out_and_not_told(name):
    strategy = make(name)
    first = strategy.ask(4)
    assert strategy.in_flight() == sorted(first)
    second = strategy.ask(4)
    assert strategy.in_flight() == sorted(first + second)
    strategy.tell([result(i, landscape_ms(i)) for i in first])
    assert strategy.in_flight() == sorted(second)


def test_depth_one_is_the_old_order():
    assert run_pipelined(make("portfolio"), 8, 48, landscape_ms, depth=1) == run(make("portfolio"), 8, 48, landscape_ms)


def distance_to_pending(name: str, seed: int, blind: bool) -> float:
    """Mean distance, in unit coordinates, from each id of a batch asked while the previous
    batch is in flight to the nearest id of that batch; ``blind``: the strategy is told
    nothing is in flight."""
    strategy = make(name, seed=seed)
    if blind:
        strategy.in_flight = list  # type: ignore[method-assign]
    run(strategy, 8, 32, landscape_ms)
    out = strategy.ask(8)
    batch = np.array(strategy.ask(8))
    a, b = LANDSCAPE.unit_coordinates(batch), LANDSCAPE.unit_coordinates(np.array(out))
    return float(np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)).min(1).mean())


@pytest.mark.parametrize("name", ["portfolio", "bayes_opt"])
def test_the_model_s_liar_keeps_the_next_batch_away_from_the_one_in_flight(name):
    seeds = range(6)
    aware = np.mean([distance_to_pending(name, s, blind=False) for s in seeds])
    blind = np.mean([distance_to_pending(name, s, blind=True) for s in seeds])
    assert aware > blind, (aware, blind)


def test_simulated_annealing_steps_other_chains_while_a_batch_is_in_flight():
    """Before, the chains of the batch in flight were all busy and the next batch was random filler."""
    strategy = make("simulated_annealing")
    run(strategy, 8, 16, landscape_ms)
    for _ in range(6):
        batch = strategy.ask(8)
        assert set(batch) <= set(strategy.pending)  # each id is a chain's step, none is filler
        strategy.tell([result(i, landscape_ms(i)) for i in strategy.in_flight() if i not in batch])
    assert len(strategy.chains) == 16
