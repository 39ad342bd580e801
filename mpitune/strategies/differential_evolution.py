"""Differential evolution (best/1/bin) in unit coordinates, one trial vector per batch slot.

The first ``population`` results form the population: the space-filling design, or a resumed
cache. Each batch slot takes the next member in turn as its target. It proposes the trial
``best + F * (x_r1 - x_r2)``. The trial is crossed over with the target per parameter with
probability ``crossover_rate``. The trial point is snapped to the nearest unseen configuration.
When the trial's result arrives, it replaces its target if it is better. So a batch of n trials
is n independent target updates of one generation. Failures have an infinite objective, so they
never replace a member. A better result for a configuration the strategy did not propose
replaces the worst member.

Best/1/bin converges: the population collapses onto the best member. The difference vectors
shrink to nothing. The trials become snaps to the nearest unseen configuration around the best.
So the population restarts when ``patience`` generations in a row have not improved the best.
That is ``patience * population`` trials. The best member stays. Every other member is replaced
by a configuration of a new space-filling design (the next batches). The evolution continues
from the new population.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies.base import Strategy, objective
from mpitune.strategies.options import Option

NEWCOMER = -1  # pending value of a random configuration that joins the population on a restart
OPTIONS = (
    Option("population", int, 20, "members of the population; the design until this many results are in", 3, 10**6),
    Option("differential_weight", float, 0.5, "F, the scale of the difference added to the best member", 0, 2),
    Option("crossover_rate", float, 0.7, "the chance that a parameter of a trial comes from the mutant", 0, 1),
    Option("patience", int, 2, "generations without a better best member before the population restarts", 1, 10**6),
)


class DifferentialEvolution(Strategy):
    def __init__(
        self,
        space: SearchSpace,
        seed: int,
        population: int,
        differential_weight: float,
        crossover_rate: float,
        patience: int,
    ):
        super().__init__(space, seed)
        self.population = population
        self.weight = differential_weight
        self.crossover_rate = crossover_rate
        self.patience = patience
        self.rng = np.random.default_rng(seed)
        self.members: list[int] = []  # config ids, formed once enough results are told
        self.pending: dict[int, int] = {}  # trial config id -> index of its target member, or NEWCOMER
        self._turn = 0
        self._stale = 0  # trials told since the best member last improved
        self._newcomers = 0  # random members still to hand out after a restart

    def ask(self, n: int) -> list[int]:
        if not self.members and len(self.values) >= self.population:
            self.members = self.best(self.population)
        if not self.members:
            return self.space_filling(n)
        batch: list[int] = []
        if self._newcomers:
            fresh = self.space_filling(min(n, self._newcomers))
            self._newcomers -= len(fresh)
            self.pending.update((i, NEWCOMER) for i in fresh)
            batch += fresh
        k = len(self.members)
        if len(batch) < n and k >= 3:
            batch += self._trials(n - len(batch))
        return batch + self.random_unseen(n - len(batch))

    def _trials(self, n: int) -> list[int]:
        unit = self.space.unit_coordinates
        k, d = len(self.members), len(self.space.names)
        targets = [(self._turn + i) % k for i in range(n)]
        self._turn = (self._turn + n) % k
        member_coords = unit(self.members)
        best = unit(self.best(1)[0])
        r = np.array([self.rng.choice(k, 2, replace=False) for _ in targets]).reshape(-1, 2)
        mutants = best + self.weight * (member_coords[r[:, 0]] - member_coords[r[:, 1]])
        cross = self.rng.random((n, d)) < self.crossover_rate
        cross[np.arange(n), self.rng.integers(0, d, n)] = True  # at least one parameter changes
        trials = np.clip(np.where(cross, mutants, member_coords[targets]), 0.0, 1.0)
        batch = self.nearest_unseen(trials)
        self.pending.update(zip(batch, targets))
        return batch

    def tell(self, results: Iterable[Scored]) -> None:
        results = list(results)
        before = min((self.values[i] for i in self.members), default=None)
        super().tell(results)
        trials = 0
        for r in results:
            value = objective(r)
            target = self.pending.pop(r.config_id, None)
            if not self.members:
                continue
            if target == NEWCOMER:
                self.members.append(r.config_id)
                continue
            trials += 1
            if target is None:  # not a trial of ours: compete with the worst member
                target = max(range(len(self.members)), key=lambda i: self.values[self.members[i]])
            if target < len(self.members) and value < self.values[self.members[target]]:
                self.members[target] = r.config_id
        if before is None or not self.members:
            return
        if min(self.values[i] for i in self.members) < before:
            self._stale = 0
        else:
            self._stale += trials
            if self._stale >= self.patience * self.population and not self._newcomers:
                self._restart()

    def _restart(self) -> None:
        """Keep the best member, replace the others by random configurations."""
        best = min(self.members, key=lambda i: (self.values[i], i))
        self.members = [best]
        self._turn = 0
        self._stale = 0
        self._newcomers = self.population - 1
        self.pending = {i: t for i, t in self.pending.items() if t == NEWCOMER}


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return DifferentialEvolution(space, seed, **options)
