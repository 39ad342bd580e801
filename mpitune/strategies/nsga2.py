"""NSGA-II-style search for the Pareto front of a run with several objectives.

It is the steady-state genetic algorithm (genetic_algorithm.py) with NSGA-II's selection. The
shared space-filling design lasts until ``population`` results are in. Then every batch slot is
one child. It is made by uniform crossover of two binary-tournament winners and per-parameter
resampling. It is snapped to valid unseen configurations.

NSGA-II's selection replaces "the lowest score". The population is ``population`` told
configurations, first by non-domination rank. Within a front, larger crowding distance comes
first, the ends of a front first; ties go by id. Parents are sorted that way. So the GA's
tournament (the better-placed of two random parents) is NSGA-II's crowded-comparison tournament.

It compares ``Scored.scores``, one score per objective, each to minimise (model/objective.py).
It compares them by Pareto dominance (model/judging/pareto.py). With one objective the fronts
are single configurations ordered by score. It then searches as the genetic algorithm does.
Failures score infinity in every objective. They rank last and drop out of the population.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from mpitune.model.judging.pareto import crowding, front_ranks
from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import genetic_algorithm
from mpitune.strategies.base import Strategy
from mpitune.strategies.genetic_algorithm import GeneticAlgorithm

OPTIONS = genetic_algorithm.OPTIONS  # those of the genetic algorithm it is


class NSGA2(GeneticAlgorithm):
    def __init__(self, space: SearchSpace, seed: int, population: int, mutation_rate: float, crossover_rate: float):
        super().__init__(space, seed, population, mutation_rate, crossover_rate)
        self.vectors: dict[int, tuple[float, ...]] = {}  # config id -> its scores, for everything told

    def tell(self, results: Iterable[Scored]) -> None:
        results = list(results)
        super().tell(results)  # checks that each was scored
        for r in results:
            self.vectors[r.config_id] = r.scores

    def best(self, k: int = 1) -> list[int]:
        """The ``k`` told ids NSGA-II's selection keeps, best placed first.

        They are the genetic algorithm's parents (see the module's docstring)."""
        ids = np.array(sorted(self.vectors), dtype=np.int64)
        if not len(ids):
            return []
        points = np.array([self.vectors[int(i)] for i in ids], dtype=np.float64)
        ranks = front_ranks(points, enough=k)
        crowd = np.zeros(len(ids))
        for rank in np.unique(ranks):
            members = ranks == rank
            if np.isfinite(points[members]).all():
                crowd[members] = crowding(points[members])
        order = np.lexsort((ids, -crowd, ranks))
        return [int(i) for i in ids[order[:k]]]


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return NSGA2(space, seed, **options)
