"""Steady-state genetic algorithm: every batch slot is one child of the current elite.

The population is the ``population`` best configurations told so far: a (mu + lambda) scheme.
So any batch size works. A child only has to wait for the results of the batch before it.
Until that many results are in, batches are the shared space-filling design
(``Strategy.space_filling``): the initial population.
A child takes each parameter from one of two tournament winners (uniform crossover). It then
resamples each parameter with probability ``mutation_rate``. Spare children replace those that
are invalid or already seen. If none is left, the nearest unseen configuration to the child is
taken. Failures have an infinite objective. So they lose every tournament and drop out of the
elite.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import Strategy
from mpitune.strategies.options import Option

SPARE_CHILDREN = 4  # children bred per batch slot, so invalid or repeated ones can be skipped
POPULATION = Option(
    "population",
    int,
    20,
    "the elite that breeds the children, the best results so far; the design until this many are in",
    2,
    10**6,
)
OPTIONS = (
    POPULATION,
    Option("mutation_rate", float, 0.1, "the chance that each parameter of a child is resampled", 0, 1),
    Option("crossover_rate", float, 0.9, "the chance that a child mixes two parents rather than copying one", 0, 1),
)


class GeneticAlgorithm(Strategy):
    def __init__(self, space: SearchSpace, seed: int, population: int, mutation_rate: float, crossover_rate: float):
        super().__init__(space, seed)
        self.population = population
        self.mutation_rate = mutation_rate
        self.crossover_rate = crossover_rate
        self.rng = np.random.default_rng(seed)

    def ask(self, n: int) -> list[int]:
        if len(self.values) < self.population:
            return self.space_filling(n)
        parents = self.space.indices[self.best(self.population)].astype(np.int64)
        children = self._breed(parents, SPARE_CHILDREN * n)
        ids = self.space.id_of(children)
        batch = self.claim(ids[ids >= 0], n)
        if len(batch) < n:
            batch += self.nearest_unseen(children[: n - len(batch)] / np.maximum(self.space.sizes - 1, 1))
        return batch + self.random_unseen(n - len(batch))

    def _breed(self, parents: np.ndarray, count: int) -> np.ndarray:
        """``count`` children; parents are sorted best first, so a tournament is a min of ranks."""
        rng, k, d = self.rng, len(parents), parents.shape[1]
        mothers = rng.integers(0, k, (count, 2)).min(axis=1)
        fathers = rng.integers(0, k, (count, 2)).min(axis=1)
        crossing = (rng.random((count, d)) < 0.5) & (rng.random((count, 1)) < self.crossover_rate)
        children = np.where(crossing, parents[fathers], parents[mothers])
        mutate = rng.random((count, d)) < self.mutation_rate
        resampled = (rng.random((count, d)) * self.space.sizes).astype(np.int64)
        return np.where(mutate, resampled, children)


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return GeneticAlgorithm(space, seed, **options)
