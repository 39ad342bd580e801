"""A portfolio: a surrogate model of the times, with a trust region around the best result, and
a genetic algorithm on call.

The first batches are the shared space-filling design, until ``design`` results are told. Then
``model_share`` of each batch comes from the surrogate; by default that is all of it. The
surrogate (``surrogate``) is a Gaussian process with one length scale per parameter. It scores
expected improvement times the chance to be valid. A constant liar covers the batch and the ids
still in flight. The rest comes from a genetic algorithm that is never told the model's picks,
so its elite stays its own.

From ``breed_after`` results on, the genetic algorithm is told everything, the model's results
too. ``breed_share`` of each batch (rounded down: 2 of 8) is bred from that elite, the best
found so far. The model may stay in one basin (the needles of docs/strategies.md). Crossing the
best configurations then reaches the optima it does not rank first. From ``switch`` results on,
the whole batch is the genetic algorithm's.

Of the model's picks, the first ``local_share`` (a quarter) are a trust region. They are taken
among the unseen one-parameter neighbours of the best result so far. A kernel's best
configuration often differs from a good one in a single parameter. The smooth model undervalues
such a needle when it ranks the whole space. It does not among the few dozen neighbours. The
replays that chose this split are in docs/strategies.md.

A prior (times measured elsewhere, ``start_from``) leaves the design the same. A rank test
(``surrogate.PriorUse.judge``) checks that the results' order agrees with the prior's. Once it
does, half the next batch is the prior's diverse best. The model's mean follows the prior as far
as the measurements trust it. While it is trusted, the prior's best unseen configurations join
the candidates (``surrogate.PriorUse``). Where the test drops the prior, and without one,
nothing here changes: the same ids are asked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from mpitune.model.prior import Prior
from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import genetic_algorithm, geometry, surrogate
from mpitune.strategies.base import MIN_DESIGN, Strategy
from mpitune.strategies.genetic_algorithm import GeneticAlgorithm
from mpitune.strategies.options import Option

OPTIONS = (
    Option(
        "design", int, MIN_DESIGN, "results of the shared space-filling design before the model takes over", 1, 10**6
    ),
    Option("switch", int, 1000, "results from which on the whole batch is the genetic algorithm's", 0, 10**9),
    Option("model_share", float, 1.0, "the share of each batch (rounded) from the model, until breed_after", 0, 1),
    *surrogate.MODEL_OPTIONS,
    genetic_algorithm.POPULATION,
    Option(
        "local_share",
        float,
        0.25,
        "the share of the model's picks (rounded) among the unseen neighbours of the best result",
        0,
        1,
    ),
    Option(
        "breed_after",
        int,
        100,
        "results from which on the genetic algorithm is told every result and breeds breed_share of each batch",
        0,
        10**9,
    ),
    Option("breed_share", float, 0.25, "the share of each batch (rounded down) bred from the best found", 0, 1),
)
# The breeder's mutation and crossover rates: the genetic algorithm's defaults.
BREEDING = {o.name: o.default for o in genetic_algorithm.OPTIONS if o is not genetic_algorithm.POPULATION}


class Portfolio(Strategy):
    def __init__(
        self,
        space: SearchSpace,
        seed: int,
        switch: int,
        model_share: float,
        candidates: int,
        max_observations: int,
        exploration: float,
        population: int,
        local_share: float,
        breed_after: int,
        breed_share: float,
        noise: float,
        smoothness: float,
        design: int,
    ):
        super().__init__(space, seed)
        self.design = design
        self.covariance = surrogate.Covariance(smoothness, noise)
        self.breed_after, self.breed_share = breed_after, breed_share
        self.joined = False  # the breeder was told the model's results: it breeds from the best found
        self._withheld: list[Scored] = []  # the model's results, not told to the breeder (yet)
        self.local_share = local_share
        self.switch = switch
        self.model_share = model_share
        self.modelled: set[int] = set()  # ids the model proposed: the breeder is not told them
        self.candidates = candidates
        self.max_observations = max_observations
        self.exploration = exploration
        self.rng = np.random.default_rng(seed)
        self.breeder = GeneticAlgorithm(space, seed, population, **BREEDING)
        self.scales = surrogate.LengthScales(per_parameter=True, covariance=self.covariance)
        self.use: surrogate.PriorUse | None = None  # the prior, and the trust in it
        self.prior_picks = 0  # from the prior's diverse best, once it passed the test

    def start_from(self, prior: Prior) -> None:
        super().start_from(prior)
        self.use = surrogate.PriorUse(self.space, prior, self.covariance)

    def learn_prior(self, prior: Prior) -> None:
        """A prior that grew (``Strategy.learn_prior``).

        Its times are standardised again. The trust in each source (``beta``) is kept; it is
        refitted at the next model batch anyway. The rank test judges the prior again at the next
        ask, on every result it then knows. It judges again because a growing prior knows few
        configurations when first given. So the test's first verdict rests on few results. A prior
        dropped on them is taken back once more results agree with it. One taken is dropped once
        they no longer do. The prior's first picks are still made once."""
        kept = self.use
        super().learn_prior(prior)
        self.use = surrogate.PriorUse(self.space, prior, self.covariance)
        if kept is not None and kept.beta.shape == self.use.beta.shape:
            self.use.beta, self.use.intercept = kept.beta, kept.intercept

    def ask(self, n: int) -> list[int]:
        if len(self.values) < self.design:
            batch = self.space_filling(n)  # the shared design, with a prior as without
        else:
            if len(self.values) >= self.breed_after and not self.joined:
                self.joined = True
                self.breeder.tell(self._withheld)
                self._withheld = []
            if len(self.values) >= self.switch:
                modelled = 0
            elif self.joined:
                modelled = n - int(n * self.breed_share)
            else:
                modelled = round(n * self.model_share)
            if self.use is not None:
                self.use.judge(self.values)
            with surrogate.one_blas_thread():
                batch = self._model_batch(modelled) if modelled else []
            self.modelled.update(batch)
            self.breeder.mark_seen(batch)
            batch += self.mark_seen(self.breeder.ask(n - len(batch)))
        self.breeder.mark_seen(batch)
        return batch

    def tell(self, results: Iterable[Scored]) -> None:
        results = list(results)
        super().tell(results)
        if self.joined:
            self.breeder.tell(results)
            return
        self.breeder.tell([r for r in results if r.config_id not in self.modelled])
        self._withheld += [r for r in results if r.config_id in self.modelled]

    def _model_batch(self, n: int) -> list[int]:
        """``n`` ids from the model.

        A prior that passed the rank test gives its diverse best first
        (``surrogate.PRIOR_FIRST`` picks in all). The model's mean then follows it."""
        prior = self.use if self.use is not None and self.use.agreed else None
        first: list[int] = []
        if prior is not None and self.prior_picks < surrogate.PRIOR_FIRST:
            first = self.mark_seen(prior.diverse_best(self.seen, min(n, surrogate.PRIOR_FIRST - self.prior_picks)))
            self.prior_picks += len(first)
        return first + (self._modelled(n - len(first), prior) if n > len(first) else [])

    def _modelled(self, n: int, prior: surrogate.PriorUse | None) -> list[int]:
        observed = surrogate.observations(self.best(len(self.values)), self.max_observations, self.rng)
        values = np.array([self.values[i] for i in observed])
        ok = np.isfinite(values)
        around = self.best(surrogate.SEEDS_FOR_NEIGHBOURS)
        cand = geometry.acquisition_candidates(self.space, ~self.seen_mask(), around, self.candidates, self.rng)
        if prior is not None and prior.trusted:  # the prior's best join the candidates
            extra = prior.best_unseen(~self.seen_mask(), surrogate.PRIOR_CANDIDATES)
            cand = np.concatenate([cand, extra[~np.isin(extra, cand)]])
        if ok.sum() < 2 or not len(cand):
            return self.space_filling(n)
        unit = self.space.unit_coordinates
        x_all = unit(observed)
        logs = np.log(np.maximum(values[ok], 1e-12))
        y = (logs - logs.mean()) / (logs.std() or 1.0)
        x = x_all[ok]
        if prior is None:
            scales = self.scales.fitted(x, y, len(self.values))
            # What is in flight (the previous batch, with the scheduler's two batches out) enters
            # as lies too, so that this batch looks elsewhere rather than next to it.
            fit = surrogate.condition(*surrogate.with_lies(x, y, unit(self.in_flight())), scales, self.covariance)
            offset = None
        else:
            fit, offset = self._prior_fit(observed[ok], x, y, cand)
        cand_x = unit(cand)
        feasible = 1.0 - surrogate.failure_rate(x_all, ~ok, cand_x, fit.scales, fit.covariance)
        # The first picks among the unseen one-parameter neighbours of the best result (all
        # are candidates): a trust region, where the best configurations of a kernel often
        # differ from a good one in a single parameter that the smooth model undervalues.
        near = np.isin(cand, self.space.neighbours(self.best(1)[0]))
        local = round(n * self.local_share)
        picks = surrogate.choose_batch(fit, cand_x, n, self.exploration, feasible, near, local, offset)
        batch = self.mark_seen([int(cand[j]) for j in picks])
        return batch + self.random_unseen(n - len(batch))

    def _prior_fit(
        self, ids: np.ndarray, x: np.ndarray, y: np.ndarray, cand: np.ndarray
    ) -> tuple[surrogate.Fit, np.ndarray | None]:
        """With a prior: the process conditioned on what the prior's mean leaves of ``y``.

        ``y`` includes the lies at the ids in flight. The prior's mean at the candidates comes
        back too. The length scales are fitted to what the mean of the last batch left: the
        device's departures from the prior. Where the measurements no longer trust the prior,
        this is the fit without one."""
        assert self.use is not None
        p = self.use.features(ids)
        scales = self.scales.fitted(x, y - self.use.mean(p), len(self.values))
        mean = self.use.refit(x, y, p, scales)
        pending = np.array(self.in_flight(), dtype=np.int64)
        xs, ys = surrogate.with_lies(x, y, self.space.unit_coordinates(pending))
        if not self.use.trusted:
            return surrogate.condition(xs, ys, scales, self.covariance), None
        left = ys - np.concatenate([mean, self.use.mean(self.use.features(pending))])
        fit = dataclasses.replace(surrogate.condition(xs, left, scales, self.covariance), y=ys)
        return fit, self.use.mean(self.use.features(cand))


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return Portfolio(space, seed, **options)
