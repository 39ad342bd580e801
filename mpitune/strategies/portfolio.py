"""A portfolio: a surrogate model of the times, with a trust region around the best result, and
a genetic algorithm on call.

The first batch is the shared space-filling design. Then ``model_share`` of each batch (all of
it by default) comes from the surrogate (``surrogate``: a Gaussian process with one length
scale per parameter, expected improvement times the chance to be valid, a constant liar for
the batch and for the ids still in flight), and the rest from a genetic algorithm that is
never told the model's picks, so its elite stays its own. From ``breed_after`` results on,
the genetic algorithm is told everything, the model's results too, and ``breed_share`` of each
batch (rounded down: 2 of 8) is bred from that elite, the best found so far: where the model
stays in one basin (the needles of docs/strategies.md), crossing the best configurations
reaches the optima it does not rank first. From ``switch`` results on the whole batch is the
genetic algorithm's. Of the model's picks, the first ``local_share`` (a quarter) are taken
among the unseen one-parameter neighbours of the best result so far: the best configurations
of a kernel often differ from a good one in a single parameter, a needle the smooth model
undervalues when it ranks the whole space, but not among the few dozen neighbours. Replaying
the development caches (docs/strategies.md) the model alone beat every split with a genetic
algorithm that evolves apart, up to 400 evaluations; the trust region lifted 50 to 200
evaluations, and breeding from everything after 100 lifted 400 (0.991 to 0.996).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import numpy as np

from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import surrogate
from mpitune.strategies.base import MIN_DESIGN, Strategy, integer_option, number_option
from mpitune.strategies.genetic_algorithm import GeneticAlgorithm

try:  # optional (it comes with scikit-learn): one BLAS thread while asking, as bayes_opt does
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - then BLAS uses its own default
    threadpool_limits = None

SEEDS_FOR_NEIGHBOURS = 5  # best results whose neighbourhoods are always candidates
REFIT_GROWTH = 1.25  # the length scales are refitted when the results grew by a quarter


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
    ):
        super().__init__(space, seed)
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
        self.breeder = GeneticAlgorithm(space, seed, population, 0.1, 0.9)
        self._scales: np.ndarray | None = None
        self._scales_fitted_on = 0

    def ask(self, n: int) -> list[int]:
        if len(self.values) < MIN_DESIGN:
            batch = self.space_filling(n)
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
            with threadpool_limits(1) if threadpool_limits is not None else contextlib.nullcontext():
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
        observed = self._observations()
        values = np.array([self.values[i] for i in observed])
        ok = np.isfinite(values)
        cand = self._candidates()
        if ok.sum() < 2 or not len(cand):
            return self.space_filling(n)
        unit = self.space.unit_coordinates
        x_all = unit(observed)
        logs = np.log(np.maximum(values[ok], 1e-12))
        y = (logs - logs.mean()) / (logs.std() or 1.0)
        x = x_all[ok]
        if self._scales is None or len(self.values) >= REFIT_GROWTH * self._scales_fitted_on:
            self._scales = surrogate.fit_scales(x, y, self._scales)
            self._scales_fitted_on = len(self.values)
        # What is in flight (the previous batch, with the scheduler's two batches out) enters as
        # lies too, so that this batch looks elsewhere rather than next to it.
        fit = surrogate.condition(*surrogate.with_lies(x, y, unit(self.in_flight())), self._scales)
        cand_x = unit(cand)
        feasible = 1.0 - surrogate.failure_rate(x_all, ~ok, cand_x, self._scales)
        # The first picks among the unseen one-parameter neighbours of the best result (all
        # are candidates): a trust region, where the best configurations of a kernel often
        # differ from a good one in a single parameter that the smooth model undervalues.
        near = np.isin(cand, self.space.neighbours(self.best(1)[0]))
        local = round(n * self.local_share)
        picks = surrogate.choose_batch(fit, cand_x, n, self.exploration, feasible, near, local)
        batch = self.mark_seen([int(cand[j]) for j in picks])
        return batch + self.random_unseen(n - len(batch))

    def _observations(self) -> np.ndarray:
        """What the model learns from: everything, or the best half of ``max_observations``
        plus a seeded random share of the rest, to bound the cubic cost of a fit."""
        ranked = self.best(len(self.values))
        if len(ranked) <= self.max_observations:
            return np.array(ranked)
        keep = self.max_observations // 2
        rest = self.rng.choice(ranked[keep:], self.max_observations - keep, replace=False)
        return np.concatenate([ranked[:keep], rest])

    def _candidates(self) -> np.ndarray:
        """The unseen neighbours of the best few results (the trust region where improvements
        usually are) and a seeded random sample of the rest of the unseen space."""
        unseen = ~self.seen_mask()
        near = [self.space.neighbours(i) for i in self.best(SEEDS_FOR_NEIGHBOURS)]
        close = np.unique(np.concatenate(near)) if near else np.empty(0, dtype=np.int64)
        close = close[unseen[close]]
        unseen[close] = False
        rest = np.flatnonzero(unseen)
        take = max(0, self.candidates - len(close))
        if len(rest) > take:
            rest = np.sort(self.rng.choice(rest, take, replace=False))
        return np.concatenate([close, rest]).astype(np.int64)


def create(
    space: SearchSpace,
    seed: int,
    switch: int = 1000,
    model_share: float = 1.0,
    candidates: int = 1000,
    max_observations: int = 250,
    exploration: float = 0.01,
    population: int = 20,
    local_share: float = 0.25,
    breed_after: int = 100,
    breed_share: float = 0.25,
) -> Strategy:
    return Portfolio(
        space,
        seed,
        integer_option("switch", switch, 0, 10**9),
        number_option("model_share", model_share, 0, 1),
        integer_option("candidates", candidates, 1, 10**7),
        integer_option("max_observations", max_observations, 2, 10**5),
        number_option("exploration", exploration, 0, 10),
        integer_option("population", population, 2, 10**6),
        number_option("local_share", local_share, 0, 1),
        integer_option("breed_after", breed_after, 0, 10**9),
        number_option("breed_share", breed_share, 0, 1),
    )
