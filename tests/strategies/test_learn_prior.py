"""A prior that grows while the search runs (``Strategy.learn_prior``): the results other device
models of the same job measured so far, given between asks. ``portfolio`` standardises the new
times, keeps its trust per source, and judges the prior again by its rank test."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from search_problems import LANDSCAPE, landscape_ms, result, run_pipelined

from mpitune import strategies
from mpitune.model.prior import Prior, PriorSource
from mpitune.strategies.base import Strategy

TRUE_MS = np.array([landscape_ms(i) for i in range(len(LANDSCAPE))])


def prior_of(*time_ms: np.ndarray) -> Prior:
    sources = tuple(
        PriorSource(f"model {k}", "k", "elsewhere", "", tuple(LANDSCAPE.names), 0) for k in range(len(time_ms))
    )
    return Prior(sources, time_ms)


def learning(strategy: Strategy, budget: int, prior_at: Callable[[int], Prior | None]) -> list[int]:
    """``run_pipelined`` on 8 ranks, with ``prior_at(told)`` learnt before every ask after the
    first (``told``: the results told so far; None: nothing learnt)."""
    batches: list[list[int]] = []
    told = 0
    while sum(map(len, batches)) < budget:
        while told <= len(batches) - 2:
            strategy.tell([result(i, landscape_ms(i)) for i in batches[told]])
            told += 1
        prior = prior_at(sum(map(len, batches[:told]))) if batches else None
        if prior is not None:
            strategy.learn_prior(prior)
        batches.append(strategy.ask(min(8, budget - sum(map(len, batches)))))
    return [i for batch in batches for i in batch]


def portfolio(prior: Prior | None = None) -> Strategy:
    return strategies.create("portfolio", LANDSCAPE, 0, {}, prior=prior)


def test_a_prior_learnt_before_the_first_ask_is_the_prior_given_at_the_start():
    learnt = portfolio()
    learnt.learn_prior(prior_of(TRUE_MS))
    asked = run_pipelined(learnt, 8, 48, landscape_ms)
    assert asked == run_pipelined(portfolio(prior_of(TRUE_MS)), 8, 48, landscape_ms)
    assert learnt.prior == prior_of(TRUE_MS)


def test_a_prior_that_knows_nothing_yet_changes_nothing():
    nothing = np.full(len(LANDSCAPE), math.nan)
    asked = learning(portfolio(), 48, lambda told: prior_of(nothing, nothing))
    assert asked == run_pipelined(portfolio(), 8, 48, landscape_ms)


def test_a_grown_prior_replaces_the_times_keeps_the_trust_and_is_judged_again():
    search = portfolio()
    asked = learning(search, 32, lambda told: prior_of(TRUE_MS))
    use = search.use
    assert use is not None and use.agreed and use.trusted
    beta = use.beta.copy()
    reversed_ms = 1.0 / TRUE_MS
    search.learn_prior(prior_of(reversed_ms))
    assert search.use is not use and search.use.agreed is None  # judged again at the next ask
    assert np.array_equal(search.use.beta, beta)  # the trust per source, as last refitted
    known = np.isfinite(reversed_ms)
    assert np.nanargmin(search.use.z[:, 0]) == np.flatnonzero(known)[np.argmin(reversed_ms[known])]
    search.tell([result(i, landscape_ms(i)) for i in asked[-16:]])
    search.ask(8)
    assert search.use.agreed is False and not search.use.trusted  # the measurements now contradict it


def test_the_same_growing_prior_gives_the_same_search():
    """What a resumed run relies on: given the same priors in the same order between the same
    tells, the search is rebuilt."""

    def growing(told: int) -> Prior:
        known = np.full(len(LANDSCAPE), math.nan)
        known[: 40 * told] = TRUE_MS[: 40 * told]
        return prior_of(known)

    first = learning(portfolio(), 48, growing)
    assert first == learning(portfolio(), 48, growing)
    assert first[:16] == run_pipelined(portfolio(), 8, 48, landscape_ms)[:16]  # the design


def test_a_strategy_with_no_use_for_a_prior_keeps_it_unused():
    search = strategies.create("random_sample", LANDSCAPE, 0, {})
    asked = learning(search, 24, lambda told: prior_of(TRUE_MS))
    assert search.prior == prior_of(TRUE_MS)
    assert asked == run_pipelined(strategies.create("random_sample", LANDSCAPE, 0, {}), 8, 24, landscape_ms)
