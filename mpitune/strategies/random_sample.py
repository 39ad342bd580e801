"""Uniform sampling without replacement.

The ids are put in a seeded permutation, cut into batches.

``fraction`` (0 < f <= 1) stops after that share of the space, as in Kernel Tuner.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mpitune.model.searchspace import SearchSpace
from mpitune.strategies import geometry
from mpitune.strategies.base import Strategy
from mpitune.strategies.options import Option

OPTIONS = (Option("fraction", float, 1.0, "the share of the space to sample, then stop", 0, 1, open_below=True),)


class RandomSample(Strategy):
    def __init__(self, space: SearchSpace, seed: int, fraction: float):
        super().__init__(space, seed)
        order = np.random.default_rng(seed).permutation(len(space))
        self._order = order[: max(1, round(fraction * len(space)))]
        self._pos = 0

    def ask(self, n: int) -> list[int]:
        batch, self._pos = geometry.scan(self._order, self._pos, self.seen, n)
        return self.mark_seen(batch)

    def upcoming(self, n: int) -> list[int]:
        return geometry.scan(self._order, self._pos, self.seen, n)[0]


def create(space: SearchSpace, seed: int, **options: Any) -> Strategy:
    return RandomSample(space, seed, **options)
