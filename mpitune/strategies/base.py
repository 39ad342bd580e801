"""The ask/tell contract every strategy follows, and the bookkeeping they share.

A resumed run rebuilds a strategy by replaying the recorded asks and tells with the same seed
(scheduling/resume.py). So a strategy must be a function of its seed, options and what it was
told, in that order. It uses no clocks and no other randomness.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np

from mpitune.model.prior import Prior
from mpitune.model.result import Scored
from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import geometry

FAILED = math.inf  # the objective of a failed or invalid configuration: never preferred
MIN_DESIGN = 8  # results a population strategy waits for before it searches, unless its population is smaller


def objective(result: Scored) -> float:
    """What every strategy minimises: the result's score.

    Rank 0 sets it from the run's objective, the kernel time unless the spec says otherwise
    (mpitune/model/objective.py). Lower is better. Any failure scores ``FAILED``, worse than
    everything. So failures steer a search away instead of stopping it."""
    return result.score


class Strategy(ABC):
    """Proposes configuration ids in batches and learns from their results.

    ``ask(n)`` returns up to ``n`` ids never handed out or told before. An empty list means the
    search is finished. ``tell`` receives results in any order. Before the first ask, it also
    receives everything a resumed run already has in its cache. A batch may be asked before the
    previous one is told. The scheduler keeps two in flight: ask(0), ask(1), tell(0), ask(2),
    tell(1), ... (see ``in_flight``). A strategy is deterministic for a given seed and sequence of
    asks and tells.

    Every id a strategy hands out must be marked seen. The helpers below do it for what they
    return: ``claim``, ``random_unseen``, ``space_filling``, ``nearest_unseen``. A strategy that
    extends ``tell`` calls this one, so that ``seen`` and ``values`` hold everything told.
    """

    def __init__(self, space: SearchSpace, seed: int):
        self.space = space
        self.seed = seed
        self.seen: set[int] = set()  # handed out or told: never proposed again
        self.values: dict[int, float] = {}  # config id -> objective, for everything told
        self._spare: np.ndarray | None = None  # seeded permutation behind random_unseen
        self._spare_pos = 0
        self._design_rng: np.random.Generator | None = None  # behind space_filling
        self.prior: Prior | None = None  # times measured elsewhere, set by start_from before the first ask

    def start_from(self, prior: Prior) -> None:
        """Times measured elsewhere (model/prior.py), given before the first ask.

        A strategy with no use for them keeps them unused. One that uses them must stay a function
        of its seed, options, prior and what it was told. Then a resumed run given the same prior
        rebuilds it."""
        self.prior = prior

    def learn_prior(self, prior: Prior) -> None:
        """Times measured elsewhere while this search runs, given between asks.

        They come from the other device models of one job, say. Each call gives the whole prior so
        far, with the same sources each time. It replaces the one given before. As with
        ``start_from``, a strategy with no use for a prior keeps it unused. Replayed in the same
        order with the same tells, it rebuilds the same search."""
        self.prior = prior

    @abstractmethod
    def ask(self, n: int) -> list[int]:
        """The next ids to measure, marked seen.

        Args:
            n: how many the scheduler wants at most (its ranks' free places).

        Returns:
            Up to ``n`` ids never handed out or told before; [] once the search is done.
        """

    def upcoming(self, n: int) -> list[int]:
        """The ids the next ``ask(n)`` will return, where the strategy already knows them.

        A strategy knows them when its order is fixed in advance; else this is []. The scheduler
        uses them to compile the next batch ahead. Nothing is handed out."""
        return []

    def tell(self, results: Iterable[Scored]) -> None:
        """Learn from measured results.

        A subclass that extends it calls this one.

        Args:
            results: scored results in any order, failures included (their score is inf);
                before the first ask, also what a resumed run's file holds.
        """
        for r in results:
            self.seen.add(r.config_id)
            self.values[r.config_id] = objective(r)

    def claim(self, candidates: Iterable[int], n: int) -> list[int]:
        """Up to ``n`` distinct, never seen ids from ``candidates`` in their order; marks them seen."""
        return self.mark_seen(geometry.first_unseen(candidates, self.seen, n))

    def random_unseen(self, n: int) -> list[int]:
        """Up to ``n`` uniformly random unseen ids.

        This fallback keeps every budget usable when a strategy has nothing better to propose.
        [] only when the space is exhausted."""
        if self._spare is None:  # the same permutation as random_sample: one shared random design
            self._spare = np.random.default_rng(self.seed).permutation(len(self.space))
        batch, self._spare_pos = geometry.scan(self._spare, self._spare_pos, self.seen, n)
        return self.mark_seen(batch)

    def design_done(self, population: int, n: int) -> bool:
        """Whether a population strategy has enough results to stop sampling its design.

        Enough is ``population`` results, or one batch (at least ``MIN_DESIGN``) when that is
        fewer. So with several ranks the second batch already uses the first."""
        return len(self.values) >= min(population, max(n, MIN_DESIGN))

    def space_filling(self, n: int) -> list[int]:
        """Up to ``n`` unseen ids of the shared space-filling design, marked seen.

        The design (``geometry.space_filling``) has its own seeded generator. So every searcher
        starts from the same design."""
        if self._design_rng is None:
            self._design_rng = np.random.default_rng([self.seed, 1])
        return self.mark_seen(geometry.space_filling(self.space, self.seen, self._design_rng, n))

    def in_flight(self) -> list[int]:
        """The ids handed out whose results are not told yet, in id order.

        On more than one rank the scheduler keeps two batches in flight. So when batch b is asked,
        batch b - 1 is still out. A strategy that proposes from what it knows should count these
        as taken (a constant liar, a busy chain). Else batch b crowds around what batch b - 1
        already tries. Some strategies keep their own ``pending``: each step or trial they await,
        and its owner."""
        return sorted(self.seen.difference(self.values))

    def seen_mask(self) -> np.ndarray:
        return geometry.seen_mask(len(self.space), self.seen)

    def nearest_unseen(self, points: np.ndarray) -> list[int]:
        """For each point in unit coordinates, the closest unseen configuration, marked seen.

        An earlier point's pick is not taken again (``geometry.nearest_unseen``)."""
        return self.mark_seen(geometry.nearest_unseen(self.space, ~self.seen_mask(), points))

    def best(self, k: int = 1) -> list[int]:
        """The ``k`` told ids with the lowest objective (failures last), ties by id."""
        return geometry.best(self.values, k)

    def mark_seen(self, batch: list[int]) -> list[int]:
        self.seen.update(batch)
        return batch
