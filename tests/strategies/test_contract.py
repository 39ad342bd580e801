"""Every registered strategy against the ask/tell contract (docs/strategies.md): it hands out
each configuration at most once, until the space is drained; it is deterministic for a seed;
it never proposes what it was told; failures do not stop it; a pickled search (the state a
stopped run saves) continues identically; what ``upcoming`` promises is what ``ask`` gives."""

import math
import pickle

import numpy as np
import pytest
from search_problems import LANDSCAPE, TINY, landscape_ms, make, result, run

from mpitune import strategies

EVERY = strategies.available()
SEED_FREE = ("brute_force",)  # Cartesian order: the one strategy the seed does not change


@pytest.mark.parametrize("n", [1, 3, 8])
@pytest.mark.parametrize("name", EVERY)
def test_drains_a_tiny_space_without_repeating(name, n):
    got = run(make(name, TINY), n, 10**6, lambda i: float(i % 5 + 1))
    assert sorted(got) == list(range(len(TINY)))
    assert make(name, TINY).ask(0) == []


@pytest.mark.parametrize("name", EVERY)
def test_same_seed_same_search_and_another_seed_another(name):
    a = run(make(name, seed=3), 4, 80, landscape_ms)
    assert a == run(make(name, seed=3), 4, 80, landscape_ms)
    assert (a == run(make(name, seed=4), 4, 80, landscape_ms)) == (name in SEED_FREE)
    assert len(set(a)) == len(a) == 80


@pytest.mark.parametrize("name", EVERY)
def test_failures_steer_but_do_not_stop_the_search(name):
    half = run(make(name), 5, 120, lambda i: math.nan if i % 2 else landscape_ms(i))
    assert len(set(half)) == len(half) == 120
    nothing = run(make(name), 5, 60, lambda i: math.nan)
    assert len(set(nothing)) == len(nothing) == 60


@pytest.mark.parametrize("name", EVERY)
def test_results_it_never_asked_for_are_learned_and_never_proposed(name):
    strategy = make(name)
    known = [int(i) for i in np.random.default_rng(0).choice(len(LANDSCAPE), 40, replace=False)]
    strategy.tell([result(i, landscape_ms(i)) for i in known])
    got = run(strategy, 6, 90, landscape_ms)
    assert len(got) == 90 and not set(got) & set(known) and len(set(got)) == 90


@pytest.mark.parametrize("name", EVERY)
def test_a_pickled_search_continues_identically(name):
    strategy = make(name, seed=1)
    run(strategy, 4, 40, landscape_ms)
    copy = pickle.loads(pickle.dumps(strategy))
    assert run(strategy, 4, 40, landscape_ms) == run(copy, 4, 40, landscape_ms)


@pytest.mark.parametrize("name", EVERY)
def test_upcoming_is_the_next_batch_or_nothing(name):
    """The scheduler compiles ``upcoming`` ahead: a promise that ``ask`` broke would waste it."""
    strategy = make(name)
    promised = 0
    for _ in range(10):
        upcoming = strategy.upcoming(4)
        batch = strategy.ask(4)
        assert upcoming in ([], batch)
        promised += bool(upcoming)
        assert strategy.upcoming(4) != batch or not batch  # handed out: never promised again
        strategy.tell([result(i, landscape_ms(i)) for i in batch])
    assert promised in (0, 10)  # an order fixed in advance is known every time, or never
