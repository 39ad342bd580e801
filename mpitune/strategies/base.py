"""The ask/tell contract every strategy follows, and the bookkeeping they share."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import numpy as np

from mpitune.model.result import Result

FAILED = math.inf  # the objective of a failed or invalid configuration: never preferred
DESIGN_CANDIDATES = 5  # random unseen candidates per slot of the space-filling design
NEAREST_BLOCK = 1 << 16  # unseen configurations per block of nearest_unseen's scan
MIN_DESIGN = 8  # results a population strategy waits for before it searches, unless its population is smaller


def objective(result: Result) -> float:
    """What every strategy minimises: the result's score, set on rank 0 from the run's
    objective (the kernel time unless the spec says otherwise; see mpitune/objective.py).
    Lower is better, and ``FAILED`` for any failure, so that failures steer a search away (they are
    worse than everything) instead of stopping it."""
    if math.isnan(result.score):
        raise ValueError(f"the result of configuration {result.config_id} was told before it was scored")
    return result.score


class Strategy:
    """Proposes configuration ids in batches and learns from their results.

    ``ask(n)`` returns up to ``n`` ids never handed out or told before; an empty list
    means the search is finished. ``tell`` receives results in any order, including,
    before the first ask, everything a resumed run already has in its cache.
    Deterministic for a given seed and sequence of tells.
    """

    def __init__(self, space, seed: int):
        self.space = space
        self.seed = seed
        self.seen: set[int] = set()  # handed out or told: never proposed again
        self.values: dict[int, float] = {}  # config id -> objective, for everything told
        self._spare: np.ndarray | None = None  # seeded permutation behind random_unseen
        self._spare_pos = 0
        self._design_rng: np.random.Generator | None = None  # behind space_filling

    def ask(self, n: int) -> list[int]:
        raise NotImplementedError

    def upcoming(self, n: int) -> list[int]:
        """The ids the next ``ask(n)`` will return, where a strategy knows them before the
        results in flight arrive (an order fixed in advance); [] where it does not. The
        scheduler uses them to compile the next batch ahead; nothing is handed out."""
        return []

    def tell(self, results: Iterable[Result]) -> None:
        for r in results:
            self.seen.add(r.config_id)
            self.values[r.config_id] = objective(r)

    def claim(self, candidates: Iterable[int], n: int) -> list[int]:
        """Up to ``n`` distinct, never seen ids from ``candidates`` in their order; marks them seen."""
        batch: list[int] = []
        for config_id in candidates:
            if len(batch) == n:
                break
            config_id = int(config_id)
            if config_id not in self.seen:
                self.seen.add(config_id)
                batch.append(config_id)
        return batch

    def random_unseen(self, n: int) -> list[int]:
        """Up to ``n`` uniformly random unseen ids: the fallback that keeps every budget usable
        when a strategy has nothing better to propose. [] only when the space is exhausted."""
        if self._spare is None:  # the same permutation as random_sample: one shared random design
            self._spare = np.random.default_rng(self.seed).permutation(len(self.space))
        batch: list[int] = []
        while len(batch) < n and self._spare_pos < len(self._spare):
            config_id = int(self._spare[self._spare_pos])
            self._spare_pos += 1
            if config_id not in self.seen:
                self.seen.add(config_id)
                batch.append(config_id)
        return batch

    def design_done(self, population: int, n: int) -> bool:
        """Whether a population strategy has enough results to search instead of sampling its
        initial design: ``population`` results, or one batch (at least ``MIN_DESIGN``) when
        that is fewer, so that with several ranks the second batch already uses the first."""
        return len(self.values) >= min(population, max(n, MIN_DESIGN))

    def space_filling(self, n: int) -> list[int]:
        """Up to ``n`` unseen ids spread over the space, for initial designs: best-candidate
        sampling, where each slot draws ``DESIGN_CANDIDATES`` random unseen configurations and
        takes the one farthest (in unit coordinates) from everything seen and chosen so far.
        Like random sampling it only ever picks valid configurations, in proportion to where
        they lie, but it avoids putting two samples close together, so a first batch covers
        more of the space than a uniform random one. Marks them seen; [] only when the space is
        exhausted."""
        if self._design_rng is None:
            self._design_rng = np.random.default_rng([self.seed, 1])
        free = np.flatnonzero(~self.seen_mask())
        if not len(free) or n <= 0:
            return []
        n = min(n, len(free))
        k = min(DESIGN_CANDIDATES, len(free) // n)
        candidates = self._design_rng.choice(free, n * k, replace=False)
        points = self.space.unit_coordinates(candidates)
        nearest = np.full(len(candidates), np.inf)  # squared distance to the nearest seen or chosen
        if self.seen:
            seen = self.space.unit_coordinates(np.fromiter(self.seen, dtype=np.int64, count=len(self.seen)))
            for start in range(0, len(seen), 4096):
                block = seen[start:start + 4096]
                dist = ((points ** 2).sum(1)[:, None] - 2 * points @ block.T + (block ** 2).sum(1)[None, :])
                nearest = np.minimum(nearest, dist.min(1))
        batch: list[int] = []
        for slot in range(n):
            j = slot * k + int(np.argmax(nearest[slot * k:(slot + 1) * k]))
            batch.append(int(candidates[j]))
            nearest = np.minimum(nearest, ((points - points[j]) ** 2).sum(1))
        self.seen.update(batch)
        return batch

    def seen_mask(self) -> np.ndarray:
        mask = np.zeros(len(self.space), dtype=bool)
        if self.seen:
            mask[np.fromiter(self.seen, dtype=np.int64, count=len(self.seen))] = True
        return mask

    def nearest_unseen(self, points: np.ndarray) -> list[int]:
        """For each point in unit coordinates (see ``SearchSpace.unit_coordinates``), the closest
        unseen configuration not taken by an earlier point (ties: the lowest id); marks them
        seen. Continuous moves (differential evolution, swarms) land between or outside
        configurations; this snaps them back without ever repeating one.

        The unseen configurations are scanned a block at a time, keeping for each point only
        its ``len(points)`` nearest: at most that many minus one are taken before it, so its
        answer is among them. Memory stays at one block's distances, however large the space."""
        points = np.asarray(points, dtype=np.float64)
        unseen = ~self.seen_mask()
        n = min(len(points), int(unseen.sum()))
        if n == 0:
            return []
        squares = (points ** 2).sum(1)[:, None]
        near_ids = [np.empty((len(points), 0), dtype=np.int64)]
        near_dist = [np.empty((len(points), 0))]
        for start in range(0, len(unseen), NEAREST_BLOCK):
            free = start + np.flatnonzero(unseen[start:start + NEAREST_BLOCK])
            if not len(free):
                continue
            coords = self.space.unit_coordinates(free)
            dist = squares - 2 * points @ coords.T + (coords ** 2).sum(1)[None, :]
            if len(free) > n:
                # Everything up to each point's n-th smallest distance, ties included, so that
                # the lowest ids among equal distances survive as a full scan would keep them.
                bound = np.partition(dist, n - 1, axis=1)[:, n - 1:n]
                rows, cols = np.nonzero(dist <= bound)
                width = np.bincount(rows, minlength=len(points)).max()
                ids = np.full((len(points), width), -1, dtype=np.int64)
                kept = np.full((len(points), width), np.inf)
                slot = np.arange(len(rows)) - np.searchsorted(rows, rows)
                ids[rows, slot], kept[rows, slot] = free[cols], dist[rows, cols]
            else:
                ids, kept = np.broadcast_to(free, dist.shape), dist
            near_ids.append(ids)
            near_dist.append(kept)
        ids, dist = np.concatenate(near_ids, axis=1), np.concatenate(near_dist, axis=1)
        batch: list[int] = []
        taken: set[int] = set()
        for i in range(n):
            by_distance = ids[i][np.lexsort((ids[i], dist[i]))].tolist()  # ties: the lowest id first
            choice = next(c for c in by_distance if c >= 0 and c not in taken)
            taken.add(choice)
            batch.append(choice)
        self.seen.update(batch)
        return batch

    def best(self, k: int = 1) -> list[int]:
        """The ``k`` told ids with the lowest objective (failures last), ties by id."""
        return heapq.nsmallest(k, self.values, key=lambda i: (self.values[i], i))  # = sorted(...)[:k], without the sort


def check(name: str, value, low: float, high: float, integer: bool = False):
    """Validate one option; the ValueError names it, as the registry promises the user."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise ValueError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return value
