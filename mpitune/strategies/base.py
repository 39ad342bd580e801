"""The ask/tell contract every strategy follows, and the bookkeeping they share."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..result import Result

FAILED = math.inf  # the objective of a failed or invalid configuration: never preferred


def objective(result: Result) -> float:
    """What every strategy minimises: the kernel time, or ``FAILED`` for any failure, so that
    failures steer a search away (they are worse than everything) instead of stopping it."""
    return result.time_ms if result.ok and math.isfinite(result.time_ms) else FAILED


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

    def ask(self, n: int) -> list[int]:
        raise NotImplementedError

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

    def seen_mask(self) -> np.ndarray:
        mask = np.zeros(len(self.space), dtype=bool)
        if self.seen:
            mask[np.fromiter(self.seen, dtype=np.int64, count=len(self.seen))] = True
        return mask

    def nearest_unseen(self, points: np.ndarray) -> list[int]:
        """For each point in unit coordinates (see ``SearchSpace.unit_coordinates``), the closest
        unseen configuration not taken by an earlier point; marks them seen. Continuous moves
        (differential evolution, swarms) land between or outside configurations; this snaps
        them back without ever repeating one."""
        free = np.flatnonzero(~self.seen_mask())
        if not len(free) or not len(points):
            return []
        coords = self.space.unit_coordinates()[free]
        points = np.asarray(points, dtype=np.float64)
        dist = ((points ** 2).sum(1)[:, None] - 2 * points @ coords.T + (coords ** 2).sum(1)[None, :])
        batch: list[int] = []
        for i in range(min(len(points), len(free))):
            j = int(np.argmin(dist[i]))
            batch.append(int(free[j]))
            dist[:, j] = np.inf
        self.seen.update(batch)
        return batch

    def best(self, k: int = 1) -> list[int]:
        """The ``k`` told ids with the lowest objective (failures last), ties by id."""
        return sorted(self.values, key=lambda i: (self.values[i], i))[:k]


def check(name: str, value, low: float, high: float, integer: bool = False):
    """Validate one option; the ValueError names it, as the registry promises the user."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise ValueError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return value
