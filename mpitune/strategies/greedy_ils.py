"""Greedy iterated local search whose neighbourhoods are evaluated as batches.

The first batch is the space-filling design, one configuration per batch slot. So a search on
n ranks starts from the best of n spread-out points. It does not spend its first batches around
one arbitrary configuration. Then a batch is filled with unseen neighbours of the current
configuration, one parameter changed. First come those one value up or down, then the others,
each group in random order. After the results come back, the search moves to the best of the
batch if it beats the current one. That is first improvement, at batch granularity.

A share ``exploration`` of every batch goes to new design points, far from everything seen.
Rounded down, that is one slot in eight by default, none below eight ranks. It keeps looking at
other basins while the local search runs. Any of them that beats the current configuration
becomes the current one. A used-up neighbourhood is a local optimum, and the search then kicks.
A random walk of ``perturbation`` steps from the best so far gives a new current configuration.
The rest of the batch is filled from its neighbourhood. So a batch never waits: a small
neighbourhood is followed by the kick in the same batch. Failures have an infinite objective and
are never moved to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import FAILED, Strategy
from mpitune.strategies.options import Option

MAX_KICKS_PER_BATCH = 8  # then fill with random configurations: the space is nearly used up
OPTIONS = (
    Option("perturbation", int, 3, "random-walk steps of a kick from the best so far", 1, 10**6),
    Option("exploration", float, 0.125, "the share of each batch (rounded down) that goes to new design points", 0, 1),
)


class GreedyILS(Strategy):
    def __init__(self, space: SearchSpace, seed: int, perturbation: int, exploration: float):
        super().__init__(space, seed)
        self.perturbation = perturbation
        self.exploration = exploration
        self.rng = np.random.default_rng(seed)
        self.current = -1

    def ask(self, n: int) -> list[int]:
        if self.current < 0:
            self.current = self.best(1)[0] if self.values else -1
            if self.current < 0:
                return self.space_filling(n)  # the start: a space-filling design; tell picks the best
        batch: list[int] = self.space_filling(int(n * self.exploration))
        kicks = 0
        while len(batch) < n and kicks <= MAX_KICKS_PER_BATCH:
            batch += self.claim(self._neighbourhood(self.current), n - len(batch))
            if len(batch) < n:
                kicks += 1
                self.current = self._kick()
                batch += self.claim([self.current], n - len(batch))
        return batch + self.random_unseen(n - len(batch))

    def _neighbourhood(self, config_id: int) -> np.ndarray:
        adjacent = self.space.neighbours(config_id, adjacent=True)
        every = self.space.neighbours(config_id)
        rest = np.setdiff1d(every, adjacent, assume_unique=True)
        return np.concatenate([self.rng.permutation(adjacent), self.rng.permutation(rest)])

    def _kick(self) -> int:
        config_id = self.best(1)[0] if self.values else self.current
        for _ in range(self.perturbation):
            neighbours = self.space.neighbours(config_id)
            if not len(neighbours):
                break
            config_id = int(self.rng.choice(neighbours))
        return config_id

    def tell(self, results: Iterable[Scored]) -> None:
        results = list(results)
        super().tell(results)
        told = [r.config_id for r in results]
        if not told:
            return
        candidate = min(told, key=lambda i: (self.values[i], i))
        if self.current < 0 or self.values[candidate] < self.values.get(self.current, FAILED):
            self.current = candidate


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return GreedyILS(space, seed, **options)
